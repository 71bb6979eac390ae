package wr_test

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rdmago/rdma/wr"
)

// A completion's error is tested as a socket error is: by errno, and a
// flushed request by ErrFlushed.
func ExampleCompletion_Err() {
	// What a poll might return after a write whose peer never answered:
	// the write's failure, then the request queued behind it, flushed.
	polled := []wr.Completion{{ID: 1, Status: wr.RetryExcErr}, {ID: 2, Status: wr.WRFlushErr}, {ID: 3}}
	for _, c := range polled {
		err := c.Err()
		switch {
		case err == nil:
			fmt.Printf("%d: done\n", c.ID)
		case errors.Is(err, wr.ErrFlushed):
			fmt.Printf("%d: flushed, never executed\n", c.ID)
		case errors.Is(err, syscall.ETIMEDOUT):
			fmt.Printf("%d: the peer did not answer: %v\n", c.ID, err)
		}
	}
	// Output:
	// 1: the peer did not answer: work request 1 completed with status "transport retry counter exceeded" (12, vendor error 0x0)
	// 2: flushed, never executed
	// 3: done
}

// A region's Remote travels to the peer in 12 bytes; the peer decodes it
// and targets RDMA reads and writes at it.
func ExampleRemote_MarshalBinary() {
	mine := wr.Remote{Addr: 0x7f0000001000, RKey: 0x1234}
	msg, _ := mine.MarshalBinary()
	fmt.Printf("%x\n", msg)

	var theirs wr.Remote // on the peer, from the message
	if err := theirs.UnmarshalBinary(msg); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%#x %#x\n", theirs.Add(64).Addr, theirs.RKey)
	fmt.Println(theirs.UnmarshalBinary(msg[:8]))
	// Output:
	// 00007f000000100000001234
	// 0x7f0000001040 0x1234
	// wr: a Remote is 12 bytes, not 8
}
