//go:build linux

package rsocket_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/rsocket"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// rawPeer is a hand-made rsocket client: an rdma_cm connection whose
// private data and messages the test writes itself, to break the protocol
// in ways no rsocket implementation would.
type rawPeer struct {
	id      *cm.ID
	rbuf    []byte // what it offers the server to write data into
	rmr     *uverbs.MR
	tmr     *uverbs.MR // its target SGL, where the server's credit updates go
	smr     *uverbs.MR // the source of its data writes
	srvData wr.Remote  // the server's first receive buffer
	srvLen  uint32
	srvCred uint16
}

// connData builds struct rs_conn_data, as the raw peer announces itself.
func (p *rawPeer) connData(version uint8) []byte {
	b := make([]byte, 40)
	b[0] = version
	binary.BigEndian.PutUint16(b[2:], 16) // credits: its receive queue
	binary.BigEndian.PutUint64(b[8:], p.tmr.Addr())
	binary.BigEndian.PutUint32(b[16:], p.tmr.RKey())
	binary.BigEndian.PutUint32(b[20:], 2)
	binary.BigEndian.PutUint64(b[24:], p.rmr.Addr())
	binary.BigEndian.PutUint32(b[32:], p.rmr.RKey())
	binary.BigEndian.PutUint32(b[36:], uint32(len(p.rbuf)/2))
	return b
}

// dialRaw connects a raw peer to port with private data of version.
func dialRaw(ctx context.Context, t *testing.T, port uint16, version uint8) (*rawPeer, error) {
	t.Helper()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	p := &rawPeer{id: id}
	t.Cleanup(func() { rdmatest.Destroy(t, id) })
	rdmatest.Must(t, id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(rdmatest.VMAddr, port), 2*time.Second))
	rdmatest.Must(t, id.ResolveRoute(ctx, 2*time.Second))
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: qp.Caps{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	p.rbuf = rdmatest.Alloc(t, 8192)
	p.rmr = rdmatest.Reg(t, id.RegWrite, p.rbuf)
	p.tmr = rdmatest.Reg(t, id.RegWrite, rdmatest.Alloc(t, 32))
	p.smr = rdmatest.Reg(t, id.RegMsgs, rdmatest.Alloc(t, 64))
	// The server's credit updates take receives here.
	for i := range 32 {
		rdmatest.Must(t, id.PostRecvv(uint64(1000+i), nil))
	}
	param := cm.DefaultConnParam()
	param.PrivateData = p.connData(version)
	if err := id.Connect(ctx, &param); err != nil {
		return nil, err
	}
	b := id.Event().PrivateData()
	if len(b) < 40 {
		t.Fatalf("server's private data: %d bytes", len(b))
	}
	p.srvCred = binary.BigEndian.Uint16(b[2:])
	p.srvData = wr.Remote{Addr: binary.BigEndian.Uint64(b[24:]), RKey: binary.BigEndian.Uint32(b[32:])}
	p.srvLen = binary.BigEndian.Uint32(b[36:])
	return p, nil
}

// send writes n bytes (0 or 1) at off in the server's first buffer with
// the message m, and waits for the write to be acknowledged: it then sits
// in the server's receive queue.
func (p *rawPeer) send(ctx context.Context, t *testing.T, off uint32, n int, m uint32) {
	t.Helper()
	w := []wr.SendWR{{ID: uint64(m), Opcode: wr.OpRDMAWriteWithImm, Imm: m, Flags: wr.Signaled,
		Remote: wr.Remote{Addr: p.srvData.Addr + uint64(off), RKey: p.srvData.RKey}}}
	if n > 0 {
		w[0].SGList = []wr.SGE{p.smr.SGE(0, n)}
	}
	if _, err := p.id.QP().PostSend(w); err != nil {
		t.Fatal(err)
	}
	wc, err := p.id.GetSendComp(ctx)
	if err != nil || wc.Status != wr.Success {
		t.Fatalf("raw peer's write: %+v, %v", wc, err)
	}
}

func rsMsg(op, data uint32) uint32 { return op<<29 | data }

// TestDeviceHostilePeer connects a peer that breaks the protocol to a
// listener: private data of another version is refused (and the listener
// serves the next client); an unknown message type, a zero-length data
// message, data beyond the buffers granted, more messages than credits and
// a credit limit beyond what the peer's receive queue holds each fail the
// accepted connection's Read with ErrProtocol, never a panic, a hang or a
// byte of the bad data, and Close then disconnects the peer.
func TestDeviceHostilePeer(t *testing.T) {
	ctx := rdmatest.Context(t)
	lc := rsocket.ListenConfig{QueueDepth: 16}
	l, err := lc.Listen(ctx, "rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	// One Accept loop for every case: a request is checked, and refused,
	// only while an Accept runs.
	conns := make(chan *rsocket.Conn)
	go func() {
		defer close(conns)
		for {
			s, err := l.AcceptRsocket()
			if err != nil {
				return
			}
			conns <- s
		}
	}()

	refuseCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = dialRaw(refuseCtx, t, port, 2)
	cancel()
	if !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("connect with private data of version 2: %v; want ECONNREFUSED", err)
	}

	for _, c := range []struct {
		name string
		bad  func(ctx context.Context, t *testing.T, p *rawPeer)
	}{
		{"unknown type", func(ctx context.Context, t *testing.T, p *rawPeer) { p.send(ctx, t, 0, 0, rsMsg(1, 0)) }},
		{"zero-length data", func(ctx context.Context, t *testing.T, p *rawPeer) { p.send(ctx, t, 0, 0, rsMsg(0, 0)) }},
		{"data beyond the grant", func(ctx context.Context, t *testing.T, p *rawPeer) {
			// The server grants its first half-ring in the private data
			// and the second in its first credit update: a byte more than
			// both.
			p.send(ctx, t, 0, 1, rsMsg(0, 2*p.srvLen+1))
		}},
		{"more messages than credits", func(ctx context.Context, t *testing.T, p *rawPeer) {
			for i := range uint32(p.srvCred) + 1 {
				p.send(ctx, t, i, 1, rsMsg(0, 1))
			}
		}},
		{"credits beyond the receive queue", func(ctx context.Context, t *testing.T, p *rawPeer) {
			p.send(ctx, t, 0, 0, rsMsg(4, 16+1000))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			p, err := dialRaw(ctx, t, port, 1)
			if err != nil {
				t.Fatalf("raw connect: %v", err)
			}
			var s *rsocket.Conn
			select {
			case s = <-conns:
			case <-ctx.Done():
			}
			if s == nil {
				t.Fatal("the listener accepted nothing")
			}
			defer s.Close()
			if p.srvCred != 16 {
				t.Fatalf("server's credits %d, want its queue depth, 16", p.srvCred)
			}
			c.bad(ctx, t, p)
			s.SetReadDeadline(time.Now().Add(10 * time.Second))
			var n int
			buf := make([]byte, 64)
			for {
				k, err := s.Read(buf)
				n += k
				if err == nil {
					continue
				}
				if !errors.Is(err, rsocket.ErrProtocol) || errors.Is(err, io.EOF) {
					t.Errorf("read after %d bytes: %v; want ErrProtocol", n, err)
				}
				t.Logf("read after %d bytes: %v", n, err)
				break
			}
			if int(n) > int(p.srvCred) {
				t.Errorf("read %d bytes, more than the %d credits granted", n, p.srvCred)
			}
			if _, err := s.Write([]byte("x")); !errors.Is(err, rsocket.ErrProtocol) {
				t.Errorf("write after the violation: %v; want ErrProtocol", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			ev, err := p.id.Channel().GetEvent(ctx)
			for err == nil && ev.Type != cm.EventDisconnected {
				ev, err = p.id.Channel().GetEvent(ctx)
			}
			if err != nil {
				t.Errorf("raw peer: no DISCONNECTED after the server's Close: %v", err)
			}
		})
	}
}
