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
