package perf

// "rdmago perf -R": the queue pairs connected with rdma_cm, wire
// compatible with perftest 4.5-0.17.
//
// With -R perftest also turns on its rdma_cm exchange (-z): the versions,
// addresses and reports of wire.go cross, one SEND per step, over an
// RC connection of their own, made by rdma_cm on the test's port in place
// of the TCP connection. Each side keeps one receive of the size of
// struct pingpong_dest posted and posts it again after each message; the
// lock-step of the exchange and seven RNR retries do the rest. The
// addresses cross as that struct, big-endian (see perfDest.encodeStruct).
//
// The order, on both sides: the exchange's connection; versions, system
// data, MTU over it; the buffer, CQs and PD on the rdma_cm device; a
// synchronisation; the test's connections, one rdma_cm ID and QP each, on
// the same port (the server listens again once the first connection is
// made, so the client retries a refused connect, 100 ms apart, for up to
// five seconds where perftest gives up after one);
// another synchronisation; then the addresses and the benchmark as
// without -R, minus the QPs' own state changes. The client disconnects
// the test's connections at the end.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	// perfCMTimeout is perftest's address and route resolution timeout.
	perfCMTimeout = 2000 * time.Millisecond
	// perfCMRetries and perfCMRetryDelay: how often and how far apart the
	// client connects again when the server is not listening (yet).
	// perftest tries 10 times, about a second in all; a server on a
	// loaded machine can take longer than that to listen again after the
	// synchronisation, so rdmago tries for five seconds.
	perfCMRetries    = 50
	perfCMRetryDelay = 100 * time.Millisecond
	// perfCMRetryCount is DEF_RETRY_COUNT, the transport and RNR retries of
	// the test's connections (perftest's --retry_count, which rdmago does
	// not take).
	perfCMRetryCount = 7
	// perfCMDisconnectWait bounds the wait for the peer's answer to the
	// client's disconnects at the end.
	perfCMDisconnectWait = 5 * time.Second
)

// perfCMStream is the exchange over rdma_cm: each Write is one SEND, each
// Read takes one received message.
type perfCMStream struct {
	ctx  context.Context
	id   *cm.ID
	mem  *mr.Memory
	mr   *uverbs.MR
	recv []byte // the receive buffer, perfDestStructSize bytes
	send []byte
	// posted: a receive is posted into recv. Read does not post the next
	// one: after the last message the peer may have disconnected already,
	// and the message it sent is no less received. The next Write posts
	// it, before the message it sends could be answered.
	posted bool
}

// Write sends p as one message and waits for its completion.
func (s *perfCMStream) Write(p []byte) (int, error) {
	if len(p) > len(s.send) {
		return 0, fmt.Errorf("exchange message of %d bytes, more than %d", len(p), len(s.send))
	}
	n := copy(s.send, p)
	if err := s.postRecv(); err != nil {
		return 0, err
	}
	if err := s.id.PostSend(0, s.send[:n], s.mr, wr.Signaled); err != nil {
		return 0, err
	}
	c, err := s.id.GetSendComp(s.ctx)
	if err != nil {
		return 0, err
	}
	if c.Status != wr.Success {
		return 0, fmt.Errorf("send completed with status %v", c.Status)
	}
	return n, nil
}

// Read takes the next message, of len(p) bytes as every step knows.
func (s *perfCMStream) Read(p []byte) (int, error) {
	if err := s.postRecv(); err != nil {
		return 0, err
	}
	c, err := s.id.GetRecvComp(s.ctx)
	if err != nil {
		return 0, err
	}
	s.posted = false // consumed, whatever its status
	if c.Status != wr.Success {
		return 0, fmt.Errorf("receive completed with status %v", c.Status)
	}
	if int(c.ByteLen) < len(p) {
		return 0, fmt.Errorf("exchange message of %d bytes, want %d", c.ByteLen, len(p))
	}
	return copy(p, s.recv), nil
}

// postRecv posts the receive unless it is posted.
func (s *perfCMStream) postRecv() error {
	if s.posted {
		return nil
	}
	if err := s.id.PostRecv(0, s.recv, s.mr); err != nil {
		return err
	}
	s.posted = true
	return nil
}

// setup gives the exchange's ID its QP (one send, one receive), buffer and
// first receive: rdma_client_connect and rdma_server_connect before their
// connect and accept.
func (s *perfCMStream) setup() error {
	if err := s.id.CreateQP(nil, uverbs.QPInitAttr{Type: qp.RC,
		Caps: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	var err error
	if s.mem, err = mr.Alloc(2 * perfDestStructSize); err != nil {
		return err
	}
	b := s.mem.Bytes()
	s.recv, s.send = b[:perfDestStructSize], b[perfDestStructSize:2*perfDestStructSize]
	if s.mr, err = s.id.RegMsgs(b[:2*perfDestStructSize]); err != nil {
		return err
	}
	return s.postRecv()
}

// close destroys the exchange's connection and what it holds.
func (s *perfCMStream) close() {
	if s.mr != nil {
		s.mr.Close()
		s.mr = nil
	}
	if s.id != nil {
		s.id.Close()
		s.id = nil
	}
	if s.mem != nil {
		s.mem.Close()
		s.mem = nil
	}
}

// perfCMServerAddr resolves the server's name to the IPv4 address perftest
// would take.
func perfCMServerAddr(ctx context.Context, host string, port int) (netip.AddrPort, error) {
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip4", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	a, _ := netip.AddrFromSlice(ips[0].To4())
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// establishCM is establish_connection with rdma_cm: the exchange's RC
// connection on the test's port.
func (r *perfRun) establishCM(ctx context.Context) int {
	o := &r.o
	const fail = " Unable to perform rdma_%s function\n Unable to init the socket connection"
	side := "server"
	if o.client() {
		side = "client"
	}
	r.cmComm = &perfCMStream{ctx: ctx}
	if o.client() {
		dst, err := perfCMServerAddr(ctx, o.server, o.port)
		if err != nil {
			fmt.Fprintf(r.stderr, "%s for %s:%d\nProblem in resolving basic address and port\n", clib.GaiStrerror(err), o.server, o.port)
			return r.failf(fail, side)
		}
		if err := perfCMRetry(ctx, func() error {
			if r.cmComm.id != nil {
				r.cmComm.close()
			}
			var err error
			if r.cmComm.id, err = cm.CreateID(nil, nil, cm.PSTCP); err != nil {
				return err
			}
			if err := r.cmComm.id.ResolveAddr(ctx, netip.AddrPort{}, dst, perfCMTimeout); err != nil {
				return err
			}
			if err := r.cmComm.id.ResolveRoute(ctx, perfCMTimeout); err != nil {
				return err
			}
			if err := r.cmComm.setup(); err != nil {
				return err
			}
			return r.cmComm.id.Connect(ctx, &cm.ConnParam{RetryCount: perfCMRetryCount, RNRRetryCount: 7})
		}); err != nil {
			fmt.Fprintf(r.stderr, "rdma_cm connection to %v: %v\n", dst, err)
			return r.failf(fail, side)
		}
	} else {
		listen, err := perfCMListen(o.port, 1)
		if err != nil {
			fmt.Fprintf(r.stderr, " rdma_cm listen on port %d: %v\n", o.port, err)
			return r.failf(fail, side)
		}
		r.cmComm.id, err = listen.GetRequest(ctx)
		// Gone before the test's connections listen on the same port.
		listen.Close()
		if err == nil {
			if err = r.cmComm.setup(); err == nil {
				err = r.cmComm.id.Accept(ctx, &cm.ConnParam{RetryCount: perfCMRetryCount, RNRRetryCount: 7})
			}
		}
		if err != nil {
			fmt.Fprintf(r.stderr, " rdma_cm connection from the client: %v\n", err)
			return r.failf(fail, side)
		}
	}
	r.conn = &perfConn{rw: r.cmComm, client: o.client(), cm: true}
	return 0
}

// perfCMListen is a synchronous ID listening on any address's port.
func perfCMListen(port, backlog int) (*cm.ID, error) {
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, err
	}
	if err := id.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))); err != nil {
		id.Close()
		return nil, err
	}
	if err := id.Listen(backlog); err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

// perfCMRetry runs connect until it succeeds or fails otherwise than by
// the server's refusal (nobody listening yet), at most perfCMRetries
// times.
func perfCMRetry(ctx context.Context, connect func() error) error {
	var err error
	for i := 0; i < perfCMRetries; i++ {
		if err = connect(); err == nil || !errors.Is(err, unix.ECONNREFUSED) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(perfCMRetryDelay):
		}
	}
	return fmt.Errorf("tried %d times: %w", perfCMRetries, err)
}

// cmSync is the synchronisation around the test's connections
// (ctx_hand_shake on zeroed addresses).
func (r *perfRun) cmSync(when string) int {
	if _, err := r.conn.handshake(perfDest{}, false); err != nil {
		return r.stepFailf(err, "Failed to sync between client and server "+when+" creating RDMA CM connection.\nFailed to create RDMA CM connection with resources.")
	}
	return 0
}

// connectCM is create_rdma_cm_connection: the test's QPs, each made on an
// rdma_cm ID of its own with the run's PD and CQs and connected by
// rdma_cm, which takes them to RTS.
func (r *perfRun) connectCM(ctx context.Context) int {
	o := &r.o
	// The server listens before the synchronisation that lets the client
	// connect, not after it as perftest does: perftest's client, refused
	// because it came first, was seen to hang instead of retrying.
	var listen *cm.ID
	if !o.client() {
		var err error
		if listen, err = perfCMListen(o.port, o.numQPs); err != nil {
			fmt.Fprintf(r.stderr, "Failed to listen on RDMA CM server listen ID: %v\n", err)
			return r.failf("Failed to create RDMA CM connection.\nFailed to create RDMA CM connection with resources.")
		}
		defer listen.Close()
	}
	if status := r.cmSync("before"); status != 0 {
		return status
	}
	attr := uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.sendCQ, RecvCQ: r.recvCQ, Caps: r.qpCaps(), SingleThreaded: o.keepAlive == 0}
	param := cm.ConnParam{RetryCount: perfCMRetryCount, RNRRetryCount: perfCMRetryCount}
	if v := o.test.verb; v == perfRead || v == perfAtomic {
		param.ResponderResources = uint8(o.outReads)
		param.InitiatorDepth = uint8(o.outReads)
	}
	const fail = "Failed to create RDMA CM connection.\nFailed to create RDMA CM connection with resources."
	if o.client() {
		dst, err := perfCMServerAddr(ctx, o.server, o.port)
		if err != nil {
			fmt.Fprintf(r.stderr, "Failed to get RDMA CM address - Error: %s.\n", clib.GaiStrerror(err))
			return r.failf(fail)
		}
		for i := 0; i < o.numQPs; i++ {
			var id *cm.ID
			err := perfCMRetry(ctx, func() error {
				if id != nil {
					id.Close()
				}
				var err error
				if id, err = cm.CreateID(nil, nil, cm.PSTCP); err != nil {
					return err
				}
				if err := id.ResolveAddr(ctx, netip.AddrPort{}, dst, perfCMTimeout); err != nil {
					return err
				}
				if err := id.ResolveRoute(ctx, perfCMTimeout); err != nil {
					return err
				}
				if err := id.CreateQP(r.pd, attr); err != nil {
					return err
				}
				return id.Connect(ctx, &param)
			})
			if id != nil {
				r.cmIDs = append(r.cmIDs, id)
			}
			if err != nil {
				fmt.Fprintf(r.stderr, "rdma_cm connection %d to %v: %v\nFailed to connect RDMA CM client, tried %d times.\n", i, dst, err, perfCMRetries)
				return r.failf(fail)
			}
			r.qps = append(r.qps, id.QP())
		}
	} else {
		for i := 0; i < o.numQPs; i++ {
			id, err := listen.GetRequest(ctx)
			if err != nil {
				fmt.Fprintf(r.stderr, "Failed to get RDMA CM event: %v\n", err)
				return r.failf(fail)
			}
			r.cmIDs = append(r.cmIDs, id)
			if err := id.CreateQP(r.pd, attr); err != nil {
				id.Reject(nil)
				fmt.Fprintf(r.stderr, "Failed to create QP: %v\n", err)
				return r.failf(fail)
			}
			if err := id.Accept(ctx, &param); err != nil {
				fmt.Fprintf(r.stderr, "Failed to accept RDMA CM connection: %v\n", err)
				return r.failf(fail)
			}
			q := id.QP()
			// As perftest: its RNR NAKs ask for its own minimum delay,
			// not the kernel's.
			q.Modify(qp.Attr{MinRNRTimer: perfMinRNRTimer}, qp.AttrMinRNRTimer)
			r.qps = append(r.qps, q)
		}
	}
	return r.cmSync("after")
}

// disconnectCM is rdma_cm_disconnect_nodes: the client ends the test's
// connections and waits, within bounds, for the server's answer.
func (r *perfRun) disconnectCM() {
	if !r.o.client() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), perfCMDisconnectWait)
	defer cancel()
	for _, id := range r.cmIDs {
		id.Disconnect(ctx)
	}
}

// releaseCM destroys the test's rdma_cm IDs, then the exchange's
// connection; the device context the run borrowed from rdma_cm goes with
// the last of them.
func (r *perfRun) releaseCM() {
	for _, id := range r.cmIDs {
		id.Close()
	}
	r.cmIDs = nil
	if r.cmComm != nil {
		r.cmComm.close()
	}
}
