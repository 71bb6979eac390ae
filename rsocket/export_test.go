package rsocket

import "fmt"

// DebugState describes the connection's protocol state, for tests that
// hang.
func (c *Conn) DebugState() string {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.s
	return fmt.Sprintf("state %#x err %v ctrl %d/%d sseq %d/%d rseq %d/%d remoteSGE %d targetSGE %d target0 %+v target1 %+v rmsg %d..%d rbufAvail %d rbufFree %d rbufOff %d granted %d sqe %d sbuf %d unread %d armed %v kicks %d",
		s.state, s.err, s.ctrlSeq, s.ctrlMax, s.sseqNo, s.sseqComp, s.rseqNo, s.rseqComp, s.remoteSGE, s.targetSGE,
		s.targetEntry(0), s.targetEntry(1), s.rmsgHead, s.rmsgTail, s.rbufAvail, s.rbufFree, s.rbufOff, s.granted, s.sqeAvail, s.sbufAvail, s.unread, e.armed, e.w.Kicks())
}

// Buffers returns the registered send buffer and receive ring, for tests
// that check WriteTo and ReadFrom lend them rather than copy.
func (c *Conn) Buffers() (sbuf, rbuf []byte) {
	return c.e.sbuf.Bytes(), c.e.rbuf.Bytes()
}

// VanishForTest destroys c's QP without telling the peer, as when c's
// machine loses power: the peer's device gets no answer from it again.
func VanishForTest(c *Conn) error {
	return c.e.id.DestroyQP()
}

// ConnDataForTest is the private data of a valid connection request, for
// tests that send one by hand.
func ConnDataForTest() []byte {
	cd := connData{
		Version:   connVersion,
		Credits:   1,
		TargetSGL: rsSGE{Addr: 0x10000, Key: 1, Length: sglSize},
		DataBuf:   rsSGE{Addr: 0x20000, Key: 1, Length: 4096},
	}
	b := cd.marshal()
	return b[:]
}
