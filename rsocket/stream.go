package rsocket

import (
	"sync/atomic"
	"unsafe"
)

// State bits of a connection, as rsocket.c's rs_state has them.
const (
	stConnected = 1 << iota // control messages may still be exchanged
	stReadable              // the peer may still send data
	stWritable              // this side may still send data
)

// stream is the protocol state of one connection: credits, buffers and
// sequence numbers, in librdmacm's names where they help to compare. It
// posts nothing itself (endpoint does), so that the message decoder can be
// tested, and fuzzed, without a device. All of it is under endpoint.mu.
type stream struct {
	state uint32
	err   error // why the connection failed, once it has
	// peerEnded records that the peer's message (DISCONNECT, or a
	// SHUTDOWN after ours) ended the connection; peerDisconnect that the
	// peer sent a DISCONNECT.
	peerEnded, peerDisconnect bool

	sqSize, rqSize uint32
	rbufSize       uint32
	sbufSize       uint32
	inline         uint32

	// Control messages (credit updates, shutdown, disconnect) in flight
	// are limited to ctrlSlots: ctrlSeq counts those sent, ctrlMax the
	// limit, raised as each completes.
	ctrlSeq, ctrlMax uint32

	// Send credits: data messages sent (sseqNo) and the limit the peer's
	// last credit update allows (sseqComp). peerRQ is the peer's receive
	// queue size, the most credits it may grant ahead of what it read.
	sseqNo, sseqComp uint16
	peerRQ           uint16
	// Receive credits: data messages the reader consumed (rseqNo), and
	// when to grant more (rseqComp).
	rseqNo, rseqComp uint16

	// The peer's target SGL, where this side writes credit updates:
	// remoteSGL names it, remoteSGE is the next entry to write.
	remoteSGL rsSGE
	remoteSGE uint32
	// swap says the peer's byte order is not ours: the SGEs written into
	// its target SGL are byte-swapped, as it reads them in its own order.
	swap bool

	// target is this side's target SGL, sglSize entries that the peer
	// writes with RDMA and this side consumes (its address and length
	// advance as data is written to it); targetSGE is the entry in use.
	target    []byte
	targetSGE int

	// The receive ring: rbuf is split into halves, each advertised to the
	// peer whole once free. rmsg holds the lengths of the data messages
	// received and not yet read, head to tail.
	rmsg          []uint32
	rmsgHead      int
	rmsgTail      int
	rbufAvail     uint32 // free bytes not yet advertised
	rbufFree      uint32 // offset of the next half to advertise
	rbufOff       uint32 // offset of the next byte to read
	granted       uint32 // bytes advertised that the peer has not yet written
	sqeAvail      uint32 // send queue entries free for data
	sbufAvail     uint32 // send buffer bytes free
	sbufOff       uint32 // where the next write's data is copied in sbuf
	unread        uint32 // bytes received and not yet read
	recvsToRepost uint32 // receives completed and not yet posted again
}

// init sets the initial state once the queues and buffers are sized, as
// rs_init_bufs does: the first half of rbuf is advertised in the private
// data, the other half is free.
func (s *stream) init(sq, rq, sbuf, rbuf, inline uint32, target []byte) {
	s.sqSize, s.rqSize, s.sbufSize, s.rbufSize, s.inline = sq, rq, sbuf, rbuf, inline
	s.target = target
	s.rmsg = make([]uint32, rq+1)
	s.ctrlMax = ctrlSlots
	s.sqeAvail = sq - ctrlSlots
	s.sbufAvail = sbuf
	s.rbufFree = rbuf / 2
	s.rbufAvail = rbuf / 2
	s.granted = rbuf / 2
	s.rseqComp = uint16(rq / 2)
	s.state = stConnected | stReadable | stWritable
}

// save takes the peer's connection data (rs_save_conn_data): where to
// write credit updates, its credits, and its first receive buffer, which
// becomes target entry 0.
func (s *stream) save(c *connData) {
	s.remoteSGL = c.TargetSGL
	s.remoteSGE = 1
	s.swap = (c.Flags&flagNet != 0) != bigEndian
	s.setTarget(0, c.DataBuf)
	s.sseqComp = c.Credits
	s.peerRQ = c.Credits
}

var bigEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 0 }()

// The target SGL is written by the peer's device while this side reads
// it, so its words are read and written atomically. Entries are in this
// host's byte order (the peer swaps them for us when it must).
func (s *stream) targetWords(i int) (*uint64, *uint32, *uint32) {
	p := unsafe.Pointer(unsafe.SliceData(s.target[i*sgeLen:]))
	return (*uint64)(p), (*uint32)(unsafe.Add(p, 8)), (*uint32)(unsafe.Add(p, 12))
}

func (s *stream) targetEntry(i int) rsSGE {
	a, k, l := s.targetWords(i)
	return rsSGE{Addr: atomic.LoadUint64(a), Key: atomic.LoadUint32(k), Length: atomic.LoadUint32(l)}
}

func (s *stream) setTarget(i int, e rsSGE) {
	a, k, l := s.targetWords(i)
	atomic.StoreUint64(a, e.Addr)
	atomic.StoreUint32(k, e.Key)
	atomic.StoreUint32(l, e.Length)
}

func (s *stream) targetLen() uint32 {
	_, _, l := s.targetWords(s.targetSGE)
	return atomic.LoadUint32(l)
}

// recvMsg handles one message from the peer: a receive's immediate data.
// A message the protocol does not allow fails the connection.
func (s *stream) recvMsg(m uint32) error {
	switch msgOp(m) {
	case opData:
		n := msgData(m)
		if n == 0 || n > s.granted {
			return protoErr("a data message of %d bytes with %d bytes of buffer granted", n, s.granted)
		}
		next := s.rmsgTail + 1
		if next == len(s.rmsg) {
			next = 0
		}
		if next == s.rmsgHead {
			return protoErr("more data messages than receive credits")
		}
		s.rmsg[s.rmsgTail] = n
		s.rmsgTail = next
		s.granted -= n
		s.unread += n
	case opSGL:
		comp := uint16(msgData(m))
		if int16(comp-s.sseqComp) < 0 {
			return protoErr("credits taken back (limit %d after %d)", comp, s.sseqComp)
		}
		if ahead := comp - s.sseqNo; int16(ahead) < 0 || ahead > s.peerRQ {
			return protoErr("credits beyond the peer's receive queue (%d ahead, queue %d)", ahead, s.peerRQ)
		}
		for i := range sglSize {
			if e := s.targetEntry(i); e.Addr+uint64(e.Length) < e.Addr {
				return protoErr("a target SGE that wraps the address space")
			}
		}
		s.sseqComp = comp
	case opIOMapSGL:
		// This side announces no iomap (librdmacm's zero default), so
		// there is nothing to update; rsocket.c ignores these too.
	case opCtrl:
		switch msgData(m) {
		case ctrlDisconnect:
			s.state = 0
			s.peerEnded, s.peerDisconnect = true, true
		case ctrlShutdown:
			if s.state&stWritable != 0 {
				s.state &^= stReadable
			} else {
				s.state = 0
				s.peerEnded = true
			}
		default:
			return protoErr("unknown control message %d", msgData(m))
		}
	default:
		return protoErr("reserved message type %d (%#08x)", msgOp(m), m)
	}
	return nil
}

// reserve accounts for a data message of length bytes about to be sent
// (rs_write_data's bookkeeping): it takes a send queue entry, send buffer
// and a credit, and the next length bytes of the current target entry,
// whose address it returns. Under mu, with canSend true and length at
// most targetLen.
func (s *stream) reserve(length uint32) (addr uint64, rkey uint32) {
	s.sseqNo++
	s.sqeAvail--
	s.sbufAvail -= length
	a, k, l := s.targetWords(s.targetSGE)
	addr, rkey = atomic.LoadUint64(a), atomic.LoadUint32(k)
	atomic.StoreUint64(a, addr+uint64(length))
	left := atomic.LoadUint32(l) - length
	atomic.StoreUint32(l, left)
	if left == 0 {
		if s.targetSGE++; s.targetSGE == sglSize {
			s.targetSGE = 0
		}
	}
	return addr, rkey
}

// grant accounts for a credit update (rs_send_credits' bookkeeping): it
// takes a control slot, moves the point at which the next update is due,
// and, when half of rbuf is free, advertises it. It returns the message,
// and the offset and length of the half advertised (length 0: none).
func (s *stream) grant() (m, off, length uint32) {
	s.ctrlSeq++
	s.rseqComp = s.rseqNo + uint16(s.rqSize/2)
	m = msg(opSGL, uint32(s.rseqNo)+s.rqSize)
	half := s.rbufSize / 2
	if s.rbufAvail < half {
		return m, 0, 0
	}
	off = s.rbufFree
	s.rbufAvail -= half
	s.granted += half
	if s.rbufFree += half; s.rbufFree >= s.rbufSize {
		s.rbufFree = 0
	}
	return m, off, half
}

// sendDone accounts for a completed send, named by the message it carried
// (the work request's ID).
func (s *stream) sendDone(m uint32) {
	switch msgOp(m) {
	case opSGL, opCtrl:
		s.ctrlMax++
		if msgOp(m) == opCtrl && msgData(m) == ctrlDisconnect {
			s.state = 0
		}
	default:
		s.sqeAvail++
		s.sbufAvail += msgData(m)
	}
}

func (s *stream) haveData() bool  { return s.rmsgHead != s.rmsgTail }
func (s *stream) ctrlAvail() bool { return s.ctrlSeq != s.ctrlMax }

// canSend is rs_can_send: a send queue entry, room in the send buffer, a
// credit, and buffer at the peer.
func (s *stream) canSend() bool {
	return s.sqeAvail > 0 && s.sbufAvail >= sndLowat && s.sseqNo != s.sseqComp && s.targetLen() != 0
}

// giveCredits is rs_give_credits: half of rbuf is free to advertise, or
// the reader consumed half the credits given since the last update.
func (s *stream) giveCredits() bool {
	return (s.rbufAvail >= s.rbufSize/2 || int16(s.rseqNo-s.rseqComp) >= 0) &&
		s.ctrlAvail() && s.state&stConnected != 0
}

// allSendsDone tells that nothing this side posted is outstanding.
func (s *stream) allSendsDone() bool {
	return s.ctrlMax-s.ctrlSeq+s.sqeAvail == s.sqSize || s.state&stConnected == 0
}

// take consumes up to n received bytes from the receive ring (rbuf), as
// rrecv does, copying them into b unless b is nil (WriteTo has had them
// already), and returns how many it consumed. A message read in part stays
// at the head, shortened.
func (s *stream) take(rbuf, b []byte, n int) int {
	done := 0
	for done < n && s.haveData() {
		size := s.rmsg[s.rmsgHead]
		if left := uint32(n - done); left < size {
			size = left
			s.rmsg[s.rmsgHead] -= left
		} else {
			s.rseqNo++
			if s.rmsgHead++; s.rmsgHead == len(s.rmsg) {
				s.rmsgHead = 0
			}
		}
		for size > 0 {
			chunk := min(size, s.rbufSize-s.rbufOff)
			if b != nil {
				copy(b[done:], rbuf[s.rbufOff:s.rbufOff+chunk])
			}
			done += int(chunk)
			size -= chunk
			s.rbufAvail += chunk
			if s.rbufOff += chunk; s.rbufOff == s.rbufSize {
				s.rbufOff = 0
			}
		}
	}
	s.unread -= uint32(done)
	return done
}

// peek returns the received bytes that lie at the head of the ring,
// contiguous in rbuf, without consuming them: what WriteTo lends to its
// writer. The peer cannot write there until take consumes them and their
// half of rbuf is advertised again.
func (s *stream) peek(rbuf []byte) []byte {
	end := s.rbufOff + min(s.unread, s.rbufSize-s.rbufOff)
	return rbuf[s.rbufOff:end:end]
}

// lendSend returns where ReadFrom's reader may put the next message's data:
// the free send buffer from sbufOff up to where it wraps, no more than one
// message and the peer's current target entry take. Under mu, with canSend
// true; the writer holds it until sendLent.
func (s *stream) lendSend() (off, n uint32) {
	return s.sbufOff, min(s.sbufAvail, s.sbufSize-s.sbufOff, s.targetLen(), maxTransfer)
}
