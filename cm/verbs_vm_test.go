package cm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// wantComp checks a completion's ID, status and opcode.
func wantComp(t testing.TB, what string, c wr.Completion, err error, id uint64, op wr.WCOpcode) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if c.ID != id || c.Status != wr.Success || c.Opcode != op {
		t.Fatalf("%s: completion %+v, want ID %d opcode %v success", what, c, id, op)
	}
}

// sendUD posts a UD send of msg (from mr; nil for an inline one) to the
// QP qpn through ah and checks its completion, what naming it.
func sendUD(ctx context.Context, t testing.TB, what string, id *cm.ID, wrID uint64, msg []byte, mr *uverbs.MR, flags wr.SendFlags, ah *uverbs.AH, qpn uint32) {
	t.Helper()
	rdmatest.Must(t, id.PostUDSend(wrID, msg, mr, flags, ah, qpn))
	wc, err := id.GetSendComp(ctx)
	wantComp(t, what, wc, err, wrID, wr.WCSend)
}

func wantErrno(t testing.TB, what string, err error, errno unix.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("%s: got %v, want %v", what, err, errno)
	}
}

// TestDeviceVerbsRC runs every rdma_verbs.h call on an RC connection and
// checks the data.
func TestDeviceVerbsRC(t *testing.T) {
	ctx := rdmatest.Context(t)
	sbuf := rdmatest.Alloc(t, 3*4096)
	var smsg, sread, swrite *uverbs.MR
	p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
		smsg = rdmatest.Reg(t, s.RegMsgs, sbuf[:4096])
		sread = rdmatest.Reg(t, s.RegRead, sbuf[4096:8192])
		swrite = rdmatest.Reg(t, s.RegWrite, sbuf[8192:])
		rdmatest.Must(t, s.PostRecv(1, sbuf[0:64], smsg))
		rdmatest.Must(t, s.PostRecvv(2, []wr.SGE{smsg.SGE(100, 4), smsg.SGE(200, 60)}))
		rdmatest.Must(t, s.PostRecv(3, sbuf[300:364], smsg))
	})
	c, s := p.Client, p.Server
	cbuf, cmsg := rdmatest.Msgs(t, c, 4096)

	// PostSend from registered memory.
	copy(cbuf, "hello, server")
	rdmatest.Must(t, c.PostSend(10, cbuf[:13], cmsg, wr.Signaled))
	wc, err := c.GetSendComp(ctx)
	wantComp(t, "send", wc, err, 10, wr.WCSend)
	wc, err = s.GetRecvComp(ctx)
	wantComp(t, "recv", wc, err, 1, wr.WCRecv)
	if wc.ByteLen != 13 || string(sbuf[:13]) != "hello, server" {
		t.Fatalf("received %d bytes %q", wc.ByteLen, sbuf[:13])
	}

	// PostSendv gathers two buffers; PostRecvv scattered them.
	copy(cbuf[1000:], "abcd")
	copy(cbuf[2000:], "efghij")
	rdmatest.Must(t, c.PostSendv(11, []wr.SGE{cmsg.SGE(1000, 4), cmsg.SGE(2000, 6)}, wr.Signaled))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "sendv", wc, err, 11, wr.WCSend)
	wc, err = s.GetRecvComp(ctx)
	wantComp(t, "recvv", wc, err, 2, wr.WCRecv)
	if wc.ByteLen != 10 || string(sbuf[100:104]) != "abcd" || string(sbuf[200:206]) != "efghij" {
		t.Fatalf("scattered %d bytes: %q %q", wc.ByteLen, sbuf[100:104], sbuf[200:206])
	}

	// An inline send from Go memory, without an MR.
	msg := []byte("inline, no MR")
	rdmatest.Must(t, c.PostSend(12, msg, nil, wr.Signaled|wr.Inline))
	msg[0] = 'X' // the data was copied at post time
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "inline send", wc, err, 12, wr.WCSend)
	wc, err = s.GetRecvComp(ctx)
	wantComp(t, "inline recv", wc, err, 3, wr.WCRecv)
	if got := string(sbuf[300 : 300+wc.ByteLen]); got != "inline, no MR" {
		t.Fatalf("inline data %q", got)
	}

	// RDMA write, write gather, inline write.
	copy(cbuf[100:], "written")
	rdmatest.Must(t, c.PostWrite(20, cbuf[100:107], cmsg, wr.Signaled, swrite.Remote().Add(10)))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "write", wc, err, 20, wr.WCRDMAWrite)
	if got := string(sbuf[8192+10 : 8192+17]); got != "written" {
		t.Fatalf("write: %q", got)
	}
	rdmatest.Must(t, c.PostWritev(21, []wr.SGE{cmsg.SGE(1000, 4), cmsg.SGE(2000, 6)}, wr.Signaled, swrite.Remote().Add(100)))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "writev", wc, err, 21, wr.WCRDMAWrite)
	if got := string(sbuf[8192+100 : 8192+110]); got != "abcdefghij" {
		t.Fatalf("writev: %q", got)
	}
	rdmatest.Must(t, c.PostWrite(22, []byte("inline write"), nil, wr.Signaled|wr.Inline, swrite.Remote().Add(200)))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "inline write", wc, err, 22, wr.WCRDMAWrite)
	if got := string(sbuf[8192+200 : 8192+212]); got != "inline write" {
		t.Fatalf("inline write: %q", got)
	}

	// RDMA read and read scatter.
	copy(sbuf[4096+50:], "read me please")
	rdmatest.Must(t, c.PostRead(30, cbuf[3000:3014], cmsg, wr.Signaled, sread.Remote().Add(50)))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "read", wc, err, 30, wr.WCRDMARead)
	if got := string(cbuf[3000:3014]); got != "read me please" {
		t.Fatalf("read: %q", got)
	}
	rdmatest.Must(t, c.PostReadv(31, []wr.SGE{cmsg.SGE(3100, 5), cmsg.SGE(3200, 9)}, wr.Signaled, sread.Remote().Add(50)))
	wc, err = c.GetSendComp(ctx)
	wantComp(t, "readv", wc, err, 31, wr.WCRDMARead)
	if string(cbuf[3100:3105]) != "read " || string(cbuf[3200:3209]) != "me please" {
		t.Fatalf("readv: %q %q", cbuf[3100:3105], cbuf[3200:3209])
	}

	// A fenced, solicited send the other way.
	rbuf := cbuf[3500:3600]
	rdmatest.Must(t, c.PostRecv(40, rbuf, cmsg))
	copy(sbuf[500:], "back")
	rdmatest.Must(t, s.PostSend(41, sbuf[500:504], smsg, wr.Signaled|wr.Fence|wr.Solicited))
	wc, err = s.GetSendComp(ctx)
	wantComp(t, "reply", wc, err, 41, wr.WCSend)
	wc, err = c.GetRecvComp(ctx)
	wantComp(t, "reply recv", wc, err, 40, wr.WCRecv)
	if !bytes.Equal(rbuf[:4], []byte("back")) {
		t.Fatalf("reply %q", rbuf[:4])
	}
}

// TestDeviceVerbsErrors checks what a post refuses before the queue.
func TestDeviceVerbsErrors(t *testing.T) {
	ctx := rdmatest.Context(t)

	// No QP.
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	wantErrno(t, "send without QP", id.PostSend(1, []byte("x"), nil, wr.Inline), unix.EINVAL)
	wantErrno(t, "recv without QP", id.PostRecvv(1, nil), unix.EINVAL)
	_, err = id.GetSendComp(ctx)
	wantErrno(t, "comp without QP", err, unix.EINVAL)
	rdmatest.Destroy(t, id)

	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	p := rdmatest.ConnectCM(t, cm.PSTCP, caps, nil)
	c, s := p.Client, p.Server
	buf := rdmatest.Alloc(t, 8192)
	m := rdmatest.Reg(t, c.RegMsgs, buf[:4096])

	// Outside the MR, and no MR without inline.
	wantErrno(t, "send outside MR", c.PostSend(1, buf[4000:4200], m, wr.Signaled), unix.EINVAL)
	wantErrno(t, "recv outside MR", c.PostRecv(1, buf[5000:5100], m), unix.EINVAL)
	wantErrno(t, "write outside MR", c.PostWrite(1, buf[4096:4100], m, 0, wr.Remote{}), unix.EINVAL)
	wantErrno(t, "send without MR", c.PostSend(1, buf[:10], nil, wr.Signaled), unix.EINVAL)
	wantErrno(t, "read without MR", c.PostRead(1, buf[:10], nil, 0, wr.Remote{}), unix.EINVAL)
	wantErrno(t, "UD send without AH", c.PostUDSend(1, buf[:10], m, 0, nil, 1), unix.EINVAL)

	// Beyond the receive queue's depth.
	depth := int(c.QP().Caps().MaxRecvWR)
	for i := range depth {
		rdmatest.Must(t, c.PostRecv(uint64(100+i), buf[i*64:i*64+64], m))
	}
	wantErrno(t, "recv beyond depth", c.PostRecv(999, buf[:64], m), unix.ENOMEM)

	// Beyond the send queue's depth: the server posted no receive, so the
	// sends wait for it (RNR, retried forever) and the queue fills.
	sdepth := int(c.QP().Caps().MaxSendWR)
	for i := range sdepth {
		rdmatest.Must(t, c.PostSend(uint64(200+i), buf[:8], m, wr.Signaled))
	}
	wantErrno(t, "send beyond depth", c.PostSend(299, buf[:8], m, wr.Signaled), unix.ENOMEM)

	// Disconnect: everything outstanding comes back flushed, and nothing
	// more can be posted.
	go s.Disconnect(ctx)
	rdmatest.Must(t, c.Disconnect(ctx))
	flushed := map[uint64]wr.Status{}
	for range depth + sdepth {
		var wc wr.Completion
		if len(flushed) < depth {
			wc, err = c.GetRecvComp(ctx)
		} else {
			wc, err = c.GetSendComp(ctx)
		}
		var ce *wr.CompletionError
		if !errors.As(err, &ce) {
			t.Fatalf("after disconnect: %+v, %v", wc, err)
		}
		flushed[wc.ID] = wc.Status
	}
	for id, st := range flushed {
		if st != wr.WRFlushErr {
			t.Errorf("work request %d: status %v, want flushed", id, st)
		}
	}
	if len(flushed) != depth+sdepth {
		t.Errorf("%d flushed, want %d: %v", len(flushed), depth+sdepth, flushed)
	}
	wantErrno(t, "send after disconnect", c.PostSend(1, buf[:8], m, wr.Signaled), unix.ENOTCONN)
	wantErrno(t, "recv after disconnect", c.PostRecv(1, buf[:8], m), unix.ENOTCONN)
}

// TestDeviceNotConnected posts on an ID whose QP is not connected yet.
func TestDeviceNotConnected(t *testing.T) {
	ctx := rdmatest.Context(t)
	_, port := rdmatest.Listen(t, cm.PSTCP)
	id := rdmatest.NewID(t, nil, nil, cm.PSTCP)
	rdmatest.Must(t, id.ResolveAddr(ctx, rdmatest.VMAddrPort(0), rdmatest.VMAddrPort(port), 0))
	rdmatest.Must(t, id.ResolveRoute(ctx, 0))
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	buf, m := rdmatest.Msgs(t, id, 4096)
	wantErrno(t, "send before connect", id.PostSend(1, buf[:8], m, wr.Signaled), unix.ENOTCONN)
	wantErrno(t, "write before connect", id.PostWrite(1, buf[:8], m, wr.Signaled, wr.Remote{}), unix.ENOTCONN)
	// Receives may be posted before the connection is up.
	rdmatest.Must(t, id.PostRecv(1, buf[:64], m))
}

// TestDeviceAllocs proves the posting calls allocate nothing.
func TestDeviceAllocs(t *testing.T) {
	sbuf := rdmatest.Alloc(t, 4096)
	var smsg, swrite, sread *uverbs.MR
	p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
		smsg = rdmatest.Reg(t, s.RegMsgs, sbuf[:1024])
		swrite = rdmatest.Reg(t, s.RegWrite, sbuf[1024:2048])
		sread = rdmatest.Reg(t, s.RegRead, sbuf[2048:])
	})
	c, s := p.Client, p.Server
	cbuf, cmsg := rdmatest.Msgs(t, c, 4096)
	sgl := []wr.SGE{cmsg.SGE(0, 8), cmsg.SGE(100, 8)}
	rsgl := []wr.SGE{smsg.SGE(0, 64)}
	wcs := make([]wr.Completion, 8)
	drain := func(cq *uverbs.CQ, n int) {
		for n > 0 {
			k, err := cq.Poll(wcs)
			if err != nil {
				panic(err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != wr.Success {
					panic(wc.Err())
				}
			}
			n -= k
		}
	}
	allocs := testing.AllocsPerRun(200, func() {
		rdmatest.Must(t, s.PostRecv(1, sbuf[:64], smsg))
		rdmatest.Must(t, s.PostRecvv(2, rsgl))
		rdmatest.Must(t, c.PostSend(3, cbuf[:8], cmsg, wr.Signaled))
		rdmatest.Must(t, c.PostSendv(4, sgl, wr.Signaled|wr.Inline))
		rdmatest.Must(t, c.PostWrite(5, cbuf[:16], cmsg, wr.Signaled, swrite.Remote()))
		rdmatest.Must(t, c.PostWritev(6, sgl, wr.Signaled, swrite.Remote()))
		rdmatest.Must(t, c.PostRead(7, cbuf[200:216], cmsg, wr.Signaled, sread.Remote()))
		rdmatest.Must(t, c.PostReadv(8, sgl, wr.Signaled, sread.Remote()))
		drain(c.SendCQ(), 6)
		drain(s.RecvCQ(), 2)
	})
	if allocs != 0 {
		t.Errorf("posting allocates: %v allocations per round of 8 posts", allocs)
	}
}
