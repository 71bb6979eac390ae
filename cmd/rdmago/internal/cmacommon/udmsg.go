package cmacommon

import (
	"fmt"
	"io"

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// CreateUDMessage is the UD examples' create_message (udaddy's and
// mckey's): it allocates and registers on pd the one buffer every datagram
// of a node goes through, size bytes with room for a GRH. A size of 0
// means no messages at all: *count becomes 0, for this node and the ones
// after it, and there is no buffer. A failure prints the C program's line
// on stdout and returns -1.
func CreateUDMessage(stdout io.Writer, pd *uverbs.PD, size int32, count *int32) (*mr.Memory, *uverbs.MR, int) {
	if size == 0 {
		*count = 0
	}
	if *count == 0 {
		return nil, nil, 0
	}
	total := int64(size) + uverbs.GRHSize
	if total < 0 {
		fmt.Fprintf(stdout, "failed message allocation\n")
		return nil, nil, -1
	}
	mem, err := mr.Alloc(int(max(total, 1)))
	if err != nil {
		fmt.Fprintf(stdout, "failed message allocation\n")
		return nil, nil, -1
	}
	m, err := pd.RegMR(mem.Bytes()[:total], wr.LocalWrite)
	if err != nil {
		fmt.Fprintf(stdout, "failed to reg MR\n")
		mem.Close()
		return nil, nil, -1
	}
	return mem, m, 0
}

// MessageSGE is the message buffer m as C's SGE of length bytes names it
// (a negative size wraps, as in C).
func MessageSGE(m *uverbs.MR, length int64) wr.SGE {
	s := m.SGE(0, 0)
	s.Length = uint32(length)
	return s
}
