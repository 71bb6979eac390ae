//go:build linux

package valkeyrdma_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/valkeyrdma"
	"github.com/rdmago/rdma/wr"
)

// rawPeer is a client that speaks the transport by hand, to send what no
// Valkey client would.
type rawPeer struct {
	t   *testing.T
	id  *cm.ID
	buf []byte // 16 receive slots, then send slots
	mr  *uverbs.MR
	// The server's receive buffer, from its RegisterXferMemory.
	addr        uint64
	length, key uint32
}

func dialRaw(t *testing.T, ctx context.Context, port uint16) *rawPeer {
	t.Helper()
	caps := qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	param := cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	id, err := rdmatest.Dial(ctx, t, cm.PSTCP, port, caps, &param)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.Close() })
	p := &rawPeer{t: t, id: id}
	p.buf, p.mr = rdmatest.Msgs(t, id, 4096)
	for i := range 8 {
		rdmatest.Must(t, id.PostRecv(uint64(i), p.buf[i*32:(i+1)*32], p.mr))
	}
	// The server announces its buffer first.
	c := rdmatest.WaitWC(t, id.RecvCQ(), 1)[0]
	if c.Status != wr.Success || c.ByteLen != 32 {
		t.Fatalf("the server's first message: %+v", c)
	}
	m := p.buf[c.ID*32:]
	if op := binary.BigEndian.Uint16(m); op != 3 {
		t.Fatalf("the server's first message has opcode %d, want RegisterXferMemory (3)", op)
	}
	p.addr = binary.BigEndian.Uint64(m[16:])
	p.length = binary.BigEndian.Uint32(m[24:])
	p.key = binary.BigEndian.Uint32(m[28:])
	return p
}

// send sends n bytes of a control message made by fill.
func (p *rawPeer) send(n int, fill func(m []byte)) {
	m := p.buf[1024 : 1024+n]
	clear(m)
	fill(m)
	rdmatest.Must(p.t, p.id.PostSend(100, m, p.mr, wr.Signaled))
}

func register(addr uint64, length, key uint32) func([]byte) {
	return func(m []byte) {
		binary.BigEndian.PutUint16(m, 3)
		binary.BigEndian.PutUint64(m[16:], addr)
		binary.BigEndian.PutUint32(m[24:], length)
		binary.BigEndian.PutUint32(m[28:], key)
	}
}

// TestDeviceHostilePeer: a peer that breaks the protocol ends its own
// connection with a clear error, and the listener goes on serving.
func TestDeviceHostilePeer(t *testing.T) {
	testenv.RequireDevice(t)
	l, err := valkeyrdma.Listen("rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(valkeyrdma.Addr).Port()
	cases := []struct {
		name string
		act  func(p *rawPeer, server net.Conn)
		// want is ErrProtocol, or nil for a completion error.
		want error
	}{
		{"buffer of 0 bytes", func(p *rawPeer, _ net.Conn) { p.send(32, register(uint64(p.mr.Addr()), 0, p.mr.RKey())) }, valkeyrdma.ErrProtocol},
		{"buffer of 1 GiB", func(p *rawPeer, _ net.Conn) { p.send(32, register(uint64(p.mr.Addr()), 1<<30, p.mr.RKey())) }, valkeyrdma.ErrProtocol},
		{"unknown opcode", func(p *rawPeer, _ net.Conn) { p.send(32, func(m []byte) { m[1] = 9 }) }, valkeyrdma.ErrProtocol},
		{"short message", func(p *rawPeer, _ net.Conn) { p.send(16, func(m []byte) { m[1] = 2 }) }, valkeyrdma.ErrProtocol},
		{"length past the buffer", func(p *rawPeer, _ net.Conn) {
			w := []wr.SendWR{{
				ID:     200,
				SGList: []wr.SGE{{Addr: p.mr.Addr() + 2048, Length: 8, LKey: p.mr.LKey()}},
				Opcode: wr.OpRDMAWriteWithImm,
				Imm:    p.length + 1,
				Flags:  wr.Signaled,
				Remote: wr.Remote{Addr: p.addr, RKey: p.key},
			}}
			_, err := p.id.QP().PostSend(w)
			rdmatest.Must(p.t, err)
		}, valkeyrdma.ErrProtocol},
		{"an rkey the peer does not own", func(p *rawPeer, server net.Conn) {
			// A key of no region: the server's write is refused by
			// this side's device.
			p.send(32, register(p.mr.Addr(), 4096, p.mr.RKey()^0x5a5a00))
			time.Sleep(100 * time.Millisecond)
			server.Write([]byte("+OK\r\n"))
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					t.Error(err)
					close(accepted)
					return
				}
				accepted <- c
			}()
			p := dialRaw(t, ctx, port)
			server := <-accepted
			if server == nil {
				return
			}
			defer server.Close()
			server.SetDeadline(time.Now().Add(30 * time.Second))
			tc.act(p, server)
			_, err := server.Read(make([]byte, 64))
			t.Logf("server's Read: %v", err)
			var ce *wr.CompletionError
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("server's Read: %v, want %v", err, tc.want)
			case tc.want == nil && !errors.As(err, &ce):
				t.Errorf("server's Read: %v, want a completion error", err)
			}
			if _, err := server.Write([]byte("x")); err == nil {
				t.Error("Write on the failed connection succeeded")
			}
		})
	}
	// The listener still serves a well-behaved client.
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "hello")
		c.Read(make([]byte, 1)) // until the client closes
	}()
	c, err := valkeyrdma.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello" {
		t.Fatalf("after the hostile peers: %q, %v", b, err)
	}
}
