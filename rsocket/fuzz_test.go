package rsocket

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzParseConnData feeds the connection data decoder what a peer may put
// in its private data: it accepts only what it can use, and what it
// accepts survives a round trip.
func FuzzParseConnData(f *testing.F) {
	good := testPeer.marshal()
	f.Add(good[:])
	f.Add(good[:20])
	f.Add(make([]byte, connDataLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConnData(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("an error that is not a protocol violation: %v", err)
			}
			return
		}
		if c.Credits == 0 || c.TargetSGL.Length == 0 || c.TargetSGL.Length > maxTargetSGL || c.DataBuf.Length == 0 {
			t.Fatalf("accepted %+v", c)
		}
		if m := c.marshal(); string(m[:]) != string(b[:connDataLen]) && b[4]|b[5]|b[6] == 0 {
			t.Fatalf("round trip:\n got %x\nwant %x", m, b[:connDataLen])
		}
	})
}

// FuzzStream drives the protocol state with what a hostile or broken peer
// controls (the messages it sends, the target entries it writes) mixed
// with what this side does (reads of any size, credit updates, writes,
// completions). Whatever the order, the state stays consistent, every
// read stays inside the receive ring, and a message the protocol forbids
// is refused with a protocol violation, never a panic.
//
// Each step is five bytes: an operation and a 32-bit argument.
func FuzzStream(f *testing.F) {
	step := func(op byte, arg uint32) []byte {
		return binary.LittleEndian.AppendUint32([]byte{op}, arg)
	}
	var seed []byte
	for _, s := range [][]byte{
		step(fuzzRecv, msg(opData, 1000)),
		step(fuzzTake, 600),
		step(fuzzGrant, 0),
		step(fuzzRecv, msg(opData, testRbuf/2)),
		step(fuzzTarget, 1),
		step(fuzzRecv, msg(opSGL, testRQ+1)),
		step(fuzzSend, 3000),
		step(fuzzComplete, 0),
		step(fuzzRecv, msg(opCtrl, ctrlShutdown)),
		step(fuzzLendRecv, 100),
		step(fuzzLendSend, 5000),
		step(fuzzComplete, 0),
		step(fuzzTake, testRbuf),
	} {
		seed = append(seed, s...)
	}
	f.Add(seed)
	f.Add(step(fuzzRecv, msg(opData, testRbuf)))
	f.Add(append(step(fuzzRecv, msg(opSGL, 0xffff)), step(fuzzSend, 1)...))
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newTestStream(t, testPeer)
		rbuf := make([]byte, testRbuf)
		out := make([]byte, testRbuf+1)
		var inflight []uint32 // messages posted and not completed, oldest first
		for ; len(ops) >= 5; ops = ops[5:] {
			arg := binary.LittleEndian.Uint32(ops[1:])
			switch ops[0] % fuzzOps {
			case fuzzRecv:
				if err := s.recvMsg(arg); err != nil {
					if !errors.Is(err, ErrProtocol) {
						t.Fatalf("recvMsg(%#x): an error that is not a protocol violation: %v", arg, err)
					}
					return // the connection is failed; nothing more is read
				}
			case fuzzTake:
				unread := s.unread
				want := min(int(arg%uint32(len(out))), int(unread))
				if n := s.take(rbuf, out[:arg%uint32(len(out))], int(arg%uint32(len(out)))); n != want {
					t.Fatalf("take of %d with %d unread: %d bytes", arg%uint32(len(out)), unread, n)
				}
			case fuzzLendRecv:
				// WriteTo: what peek lends is unread, contiguous, and
				// starts where the next read would.
				p := s.peek(rbuf)
				if len(p) > int(s.unread) || (len(p) == 0) != (s.unread == 0) ||
					(len(p) > 0 && &p[0] != &rbuf[s.rbufOff]) {
					t.Fatalf("peek: %d bytes at %d with %d unread at %d", len(p), s.rbufOff, s.unread, s.rbufOff)
				}
				n := int(arg % uint32(len(p)+1))
				if got := s.take(nil, nil, n); got != n {
					t.Fatalf("take of %d lent bytes: %d", n, got)
				}
			case fuzzLendSend:
				// ReadFrom: what lendSend lends is free send buffer that
				// does not wrap, and one message may carry it.
				if s.canSend() {
					off, n := s.lendSend()
					if off != s.sbufOff || n == 0 || off+n > s.sbufSize || n > s.sbufAvail ||
						n > s.targetLen() || n > maxTransfer {
						t.Fatalf("lendSend: %d bytes at %d; sbuf %d free at %d of %d, target %d",
							n, off, s.sbufAvail, s.sbufOff, s.sbufSize, s.targetLen())
					}
					k := min(max(arg%(n+1), 1), n)
					s.reserve(k)
					s.sbufOff = (s.sbufOff + k) % s.sbufSize // as sendLent moves it
					inflight = append(inflight, msg(opData, k))
				}
			case fuzzGrant:
				if s.giveCredits() {
					m, off, n := s.grant()
					if msgOp(m) != opSGL {
						t.Fatalf("grant sends %#x", m)
					}
					if n != 0 && (n != testRbuf/2 || off%n != 0) {
						t.Fatalf("grant of %d bytes at %d", n, off)
					}
					inflight = append(inflight, m)
				}
			case fuzzTarget:
				// The peer writes an entry of our target SGL, as it may at
				// any time, with anything in it.
				s.setTarget(int(arg%sglSize), rsSGE{Addr: uint64(arg) << 20, Key: arg, Length: arg >> 12})
			case fuzzSend:
				if s.canSend() {
					n := min(max(arg%maxTransfer, 1), s.sbufAvail, s.targetLen())
					s.reserve(n)
					s.sbufOff = (s.sbufOff + n) % s.sbufSize // as stage moves it
					inflight = append(inflight, msg(opData, n))
				}
			case fuzzComplete:
				if len(inflight) > 0 {
					s.sendDone(inflight[0])
					inflight = inflight[1:]
				}
			}
			checkStream(t, s)
		}
	})
}

// Operations of FuzzStream.
const (
	fuzzRecv = iota
	fuzzTake
	fuzzGrant
	fuzzTarget
	fuzzSend
	fuzzComplete
	fuzzLendRecv
	fuzzLendSend
	fuzzOps
)

// checkStream checks the invariants of the stream's accounting.
func checkStream(t *testing.T, s *stream) {
	t.Helper()
	if s.rbufAvail+s.granted+s.unread != s.rbufSize {
		t.Fatalf("rbuf: avail %d + granted %d + unread %d != %d", s.rbufAvail, s.granted, s.unread, s.rbufSize)
	}
	var queued uint32
	for i := s.rmsgHead; i != s.rmsgTail; i = (i + 1) % len(s.rmsg) {
		if s.rmsg[i] == 0 {
			t.Fatalf("an empty message queued at %d", i)
		}
		queued += s.rmsg[i]
	}
	if queued != s.unread {
		t.Fatalf("messages queued hold %d bytes, unread %d", queued, s.unread)
	}
	if s.rbufOff >= s.rbufSize || s.rbufFree >= s.rbufSize {
		t.Fatalf("rbufOff %d rbufFree %d outside %d", s.rbufOff, s.rbufFree, s.rbufSize)
	}
	if s.sbufAvail > s.sbufSize || s.sqeAvail > s.sqSize-ctrlSlots || s.ctrlMax-s.ctrlSeq > ctrlSlots {
		t.Fatalf("send side: sbufAvail %d sqeAvail %d ctrl %d/%d", s.sbufAvail, s.sqeAvail, s.ctrlSeq, s.ctrlMax)
	}
	if s.targetSGE < 0 || s.targetSGE >= sglSize {
		t.Fatalf("target entry %d", s.targetSGE)
	}
}
