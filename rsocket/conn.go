package rsocket

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/cmsock"
)

// Conn is an rsocket connection: a net.Conn whose bytes travel as RDMA
// writes into the peer's memory.
//
// One Read and one Write may run at the same time, from different
// goroutines; Reads take turns, as do Writes. Deadlines are real: a Read or
// Write blocked past its deadline returns an error that matches
// os.ErrDeadlineExceeded and is a net.Error whose Timeout is true, and
// setting a deadline takes effect on a call already blocked. Close ends
// blocked calls; every method after it returns an error matching
// net.ErrClosed.
//
// A Conn dropped without Close is closed when the garbage collector finds
// it unreachable.
type Conn struct {
	e            *endpoint
	laddr, raddr Addr
	network      string
}

var _ net.Conn = (*Conn)(nil)

// Addr is the address of an rsocket endpoint: an IP address and port, as
// rdma_cm binds and resolves them.
type Addr struct {
	netip.AddrPort
	Net string // "rdma", "rdma4" or "rdma6"; empty means "rdma"
}

// Network is the network name, "rdma" unless the address says otherwise.
func (a Addr) Network() string {
	if a.Net == "" {
		return "rdma"
	}
	return a.Net
}

func newConn(e *endpoint, network string) *Conn {
	c := &Conn{
		e:       e,
		network: network,
		laddr:   Addr{e.id.SrcAddr(), network},
		raddr:   Addr{e.id.DstAddr(), network},
	}
	runtime.AddCleanup(c, func(e *endpoint) { e.close() }, e)
	return c
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		// Here, not in OpErr: the addresses, made interfaces for its
		// call, would cost two allocations on every Read and Write.
		return err
	}
	return cmsock.OpErr(op, c.network, c.laddr, c.raddr, err, errClosed)
}

// Read reads what has arrived, up to len(b) bytes, waiting for data if
// none has. After the peer's last byte, once it shut its sending down
// (CloseWrite) or closed, Read returns io.EOF.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.e.read(b)
	if err != nil {
		return n, c.opErr("read", err)
	}
	return n, nil
}

func (e *endpoint) read(b []byte) (int, error) {
	defer e.turn(dirRead).Unlock()
	if err := e.usable(dirRead); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := e.awaitData(); err != nil {
		return 0, err
	}
	n := e.s.take(e.rbuf.Bytes(), b, len(b))
	e.updateCredits()
	e.mu.Unlock()
	return n, nil
}

// usable tells why a call in direction dir may not start: the connection
// is closed, or the direction's deadline has passed (a call made then
// fails at once, as package net's do, even if it could go on without
// waiting).
func (e *endpoint) usable(dir int) error {
	if e.closed.Load() {
		return errClosed
	}
	if e.deadlines.Passed(dir) {
		return errDeadline
	}
	return nil
}

// awaitData waits until received data is there, and returns with mu held,
// or returns io.EOF after the peer's last byte, or why the connection
// failed.
func (e *endpoint) awaitData() error {
	e.mu.Lock()
	if !e.s.haveData() {
		// wait polls first, and returns at once if that finds data or
		// the end (completions not yet reaped may hold data, even when
		// the connection has ended since). A poll here as well would be
		// a second one with nothing between, on every wait.
		e.mu.Unlock()
		if err := e.wait(dirRead, condRead); err != nil {
			return err
		}
	}
	if !e.s.haveData() {
		err := e.s.err
		e.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return err
	}
	return nil
}

// turn takes a direction's turn: its lock, once no WriteTo or ReadFrom has
// that direction's buffer lent out.
func (e *endpoint) turn(dir int) *sync.Mutex {
	mu := &e.rmu
	if dir == dirWrite {
		mu = &e.wmu
	}
	mu.Lock()
	for e.lent[dir] {
		mu.Unlock()
		// Only waited for: the lender holds it until the buffer is back.
		e.lendMu[dir].Lock()
		//lint:ignore SA2001 the critical section is the wait itself
		e.lendMu[dir].Unlock()
		mu.Lock()
	}
	return mu
}

// lend marks the direction's buffer lent and gives up its lock (which the
// caller holds), so that the lender can call user code.
func (e *endpoint) lend(dir int, mu *sync.Mutex) {
	e.lendMu[dir].Lock()
	e.lent[dir] = true
	mu.Unlock()
}

// unlend takes the direction's lock again and ends the lend.
func (e *endpoint) unlend(dir int) *sync.Mutex {
	mu := &e.rmu
	if dir == dirWrite {
		mu = &e.wmu
	}
	mu.Lock()
	e.lent[dir] = false
	e.lendMu[dir].Unlock()
	return mu
}

// Write writes all of b, waiting for the peer's buffer and credits as it
// must. It returns an error, with the bytes written before it, when the
// deadline passes, the connection fails, or either side ended it.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.e.write(b)
	if err != nil {
		return n, c.opErr("write", err)
	}
	return n, nil
}

func (e *endpoint) write(b []byte) (int, error) {
	defer e.turn(dirWrite).Unlock()
	if err := e.usable(dirWrite); err != nil {
		return 0, err
	}
	n := 0
	olen := uint32(olapStart)
	for n < len(b) {
		e.mu.Lock()
		if !e.test(condWrite) {
			e.mu.Unlock()
			if err := e.wait(dirWrite, condWrite); err != nil {
				return n, err
			}
		}
		if err := e.writable(); err != nil {
			e.mu.Unlock()
			return n, err
		}
		s := &e.s
		// Large writes start small and double, so that the peer sees
		// the first bytes early (rsend's olen).
		var size uint32
		if left := len(b) - n; int(olen) < left {
			size = olen
			if olen < maxTransfer {
				olen <<= 1
			}
		} else {
			size = uint32(left)
		}
		size = min(size, s.sbufAvail, s.targetLen())
		nsge := e.stage(b[n : n+int(size)])
		err := e.writeData(nsge, size)
		if err != nil {
			e.fail(err)
		}
		e.mu.Unlock()
		if err != nil {
			return n, err
		}
		n += int(size)
	}
	return n, nil
}

// WriteTo writes what arrives to w until the peer's last byte, and returns
// how many bytes it wrote and the first error; reaching io.EOF is not one.
// It hands w the receive buffer itself, saving the copy that io.Copy
// through Read makes. w's call may block as long as it likes: Close does
// not wait for it (Reads do), and the bytes it was handed stay valid after
// Close. The read deadline bounds the waits for data. io.Copy(w, c) calls
// it.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	n, err := c.e.writeTo(w)
	return n, c.opErr("writeto", err)
}

func (e *endpoint) writeTo(w io.Writer) (total int64, err error) {
	for {
		p, err := e.lendRecv()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		n, werr := e.writeLent(w, p)
		total += int64(n)
		if err := e.takeLent(n); err != nil {
			return total, err
		}
		if werr != nil {
			return total, werr
		}
	}
}

// writeLent calls w.Write with data lent from the receive buffer. Should
// w panic, the lend ends before the panic goes on, so that the connection
// stays usable.
func (e *endpoint) writeLent(w io.Writer, p []byte) (n int, err error) {
	done := false
	defer func() {
		if !done {
			e.takeLent(0)
		}
	}()
	n, err = w.Write(p)
	done = true
	switch {
	case n < 0 || n > len(p):
		return 0, errInvalidWrite
	case err == nil && n < len(p):
		err = io.ErrShortWrite
	}
	return n, err
}

// errInvalidWrite is io.Copy's answer to a writer that claims more than it
// was given.
var errInvalidWrite = errors.New("rsocket: invalid write result")

// lendRecv waits for received data, as read does, and lends out what lies
// contiguous at the head of the receive ring.
func (e *endpoint) lendRecv() ([]byte, error) {
	mu := e.turn(dirRead)
	err := e.usable(dirRead)
	if err == nil {
		err = e.awaitData()
	}
	if err != nil {
		mu.Unlock()
		return nil, err
	}
	p := e.s.peek(e.rbuf.Bytes())
	e.mu.Unlock()
	e.lend(dirRead, mu)
	return p, nil
}

// takeLent ends WriteTo's lend: it consumes the n bytes written and grants
// the peer credits for them.
func (e *endpoint) takeLent(n int) error {
	mu := e.unlend(dirRead)
	defer mu.Unlock()
	if e.closed.Load() {
		return errClosed
	}
	e.mu.Lock()
	e.s.take(nil, nil, n)
	e.updateCredits()
	e.mu.Unlock()
	return nil
}

// ReadFrom reads from r until io.EOF or an error and writes what it reads,
// returning how many bytes it wrote and the first error; io.EOF from r is
// not one. It hands r the send buffer itself, saving the copy that io.Copy
// through Write makes. r's call may block as long as it likes: Close and
// CloseWrite do not wait for it (Writes do); what r returns after either
// is not sent. The write deadline bounds the waits for room to send.
// io.Copy(c, r) calls it.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	n, err := c.e.readFrom(r)
	return n, c.opErr("readfrom", err)
}

func (e *endpoint) readFrom(r io.Reader) (total int64, err error) {
	for {
		p, err := e.lendSend()
		if err != nil {
			return total, err
		}
		n, rerr := e.readLent(r, p)
		if err := e.sendLent(n); err != nil {
			return total, err
		}
		total += int64(n)
		switch {
		case rerr == io.EOF:
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}

// readLent calls r.Read with send buffer lent out; a panic in r ends the
// lend, as writeLent's does.
func (e *endpoint) readLent(r io.Reader, p []byte) (n int, err error) {
	done := false
	defer func() {
		if !done {
			e.sendLent(0)
		}
	}()
	n, err = r.Read(p)
	done = true
	if n < 0 || n > len(p) {
		return 0, errInvalidRead
	}
	return n, err
}

// errInvalidRead is io.Copy's answer to a reader that claims more than it
// was given.
var errInvalidRead = errors.New("rsocket: invalid read result")

// lendSend waits for room to send, as write does, and lends out the free
// send buffer that one message may carry.
func (e *endpoint) lendSend() ([]byte, error) {
	mu := e.turn(dirWrite)
	if err := e.usable(dirWrite); err != nil {
		mu.Unlock()
		return nil, err
	}
	e.mu.Lock()
	if !e.test(condWrite) {
		e.mu.Unlock()
		if err := e.wait(dirWrite, condWrite); err != nil {
			mu.Unlock()
			return nil, err
		}
	}
	if err := e.writable(); err != nil {
		e.mu.Unlock()
		mu.Unlock()
		return nil, err
	}
	off, n := e.s.lendSend()
	p := e.sbuf.Bytes()[off : off+n : off+n]
	e.mu.Unlock()
	e.lend(dirWrite, mu)
	return p, nil
}

// sendLent ends ReadFrom's lend: it sends the n bytes the reader put at
// the start of the part lent. Nothing else took send resources meanwhile
// (Writes waited), so what lendSend found free still is.
func (e *endpoint) sendLent(n int) error {
	mu := e.unlend(dirWrite)
	defer mu.Unlock()
	if e.closed.Load() {
		return errClosed
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.writable(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	s := &e.s
	e.sge[0] = e.sbuf.SGE(int(s.sbufOff), n)
	if s.sbufOff += uint32(n); s.sbufOff == s.sbufSize {
		s.sbufOff = 0
	}
	err := e.writeData(1, uint32(n))
	if err != nil {
		e.fail(err)
	}
	return err
}

// writable tells why this side may send no more: the connection failed,
// this side shut its sending down, or the peer ended the connection.
// Under mu.
func (e *endpoint) writable() error {
	s := &e.s
	switch {
	case s.state&stWritable != 0:
		return nil
	case s.err != nil:
		return s.err
	case e.shutWrite:
		return syscall.EPIPE
	}
	return syscall.ECONNRESET
}

// stage copies p into the send buffer's ring at sbufOff and describes it
// in e.sge, with two SGEs where it wraps. Under mu.
func (e *endpoint) stage(p []byte) int {
	s := &e.s
	sb := e.sbuf.Bytes()[:s.sbufSize]
	first := copy(sb[s.sbufOff:], p)
	e.sge[0] = e.sbuf.SGE(int(s.sbufOff), first)
	if first == len(p) {
		if s.sbufOff += uint32(first); s.sbufOff == s.sbufSize {
			s.sbufOff = 0
		}
		return 1
	}
	rest := copy(sb, p[first:])
	e.sge[1] = e.sbuf.SGE(0, rest)
	s.sbufOff = uint32(rest)
	return 2
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.e.closed.Load() {
		return c.opErr("set deadline", errClosed)
	}
	c.e.deadlines.Set(dirRead, t, c.e.kick)
	c.e.deadlines.Set(dirWrite, t, c.e.kick)
	return nil
}

// SetReadDeadline sets the deadline of Read calls, those blocked now
// included. The zero time means none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.e.closed.Load() {
		return c.opErr("set deadline", errClosed)
	}
	c.e.deadlines.Set(dirRead, t, c.e.kick)
	return nil
}

// SetWriteDeadline sets the deadline of Write calls, those blocked now
// included. A Write that times out may have written part of its data.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.e.closed.Load() {
		return c.opErr("set deadline", errClosed)
	}
	c.e.deadlines.Set(dirWrite, t, c.e.kick)
	return nil
}

// CloseWrite shuts down the sending side (rshutdown SHUT_WR): the peer
// reads io.EOF after the last byte written, and may go on sending.
func (c *Conn) CloseWrite() error {
	return c.opErr("close", c.e.shutdown(unix.SHUT_WR))
}

// CloseRead shuts down the receiving side (SHUT_RD): Reads return io.EOF.
// The peer learns of it only once this side's sending is shut down too.
func (c *Conn) CloseRead() error {
	return c.opErr("close", c.e.shutdown(unix.SHUT_RD))
}

// Close closes the connection: it tells the peer (DISCONNECT), waits a
// moment for what was written to be delivered, disconnects and frees the
// connection's resources. Blocked Reads and Writes return.
func (c *Conn) Close() error {
	return c.opErr("close", c.e.close())
}

// closeLinger bounds how long Close waits for sends to complete.
const closeLinger = 2 * time.Second

// shutdown is rshutdown.
func (e *endpoint) shutdown(how int) error {
	lock := &e.wmu
	if how == unix.SHUT_RD {
		lock = &e.rmu
	}
	lock.Lock()
	defer lock.Unlock()
	if e.closed.Load() {
		return errClosed
	}
	return e.shutdownLocked(how, dirWrite)
}

func (e *endpoint) shutdownLocked(how, dir int) error {
	e.mu.Lock()
	s := &e.s
	if s.state&stConnected == 0 {
		e.mu.Unlock()
		return nil
	}
	var ctrl uint32
	switch how {
	case unix.SHUT_RDWR:
		ctrl = ctrlDisconnect
		s.state &^= stReadable | stWritable
		e.shutWrite = true
	case unix.SHUT_WR:
		s.state &^= stWritable
		e.shutWrite = true
		ctrl = ctrlDisconnect
		if s.state&stReadable != 0 {
			ctrl = ctrlShutdown
		}
	default:
		s.state &^= stReadable
		if s.state&stWritable != 0 {
			e.mu.Unlock()
			e.wakeAll()
			return nil
		}
		ctrl = ctrlDisconnect
	}
	e.wakeAll()
	if !s.ctrlAvail() {
		e.mu.Unlock()
		if err := e.wait(dir, condCtrl); err != nil {
			return err
		}
	}
	if s.state&stConnected != 0 && s.ctrlAvail() {
		s.ctrlSeq++
		if err := e.postMsg(msg(opCtrl, ctrl)); err != nil {
			e.fail(err)
		}
		if ctrl == ctrlDisconnect {
			e.sentEnd = true
		}
	}
	e.mu.Unlock()
	if err := e.wait(dir, condSendsDone); err != nil {
		return err
	}
	e.mu.Unlock()
	return nil
}

// close is Close, and the cleanup of a Conn dropped without it.
func (e *endpoint) close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	e.kick()
	e.rmu.Lock()
	e.wmu.Lock()
	defer e.wmu.Unlock()
	defer e.rmu.Unlock()
	e.deadlines.Set(dirClose, time.Now().Add(closeLinger), e.kick)
	e.shutdownLocked(unix.SHUT_RDWR, dirClose)
	e.mu.Lock()
	awaitPeer := e.s.peerEnded && !e.sentEnd && e.cmGone != nil
	// Where the peer's SHUTDOWN ended the connection (both sides shut
	// their sending down, the two SHUTDOWNs crossing), an rdmago peer
	// waits here too, and each used to wait for the other to disconnect
	// until the linger ended. So this side sends a DISCONNECT of its own
	// first. It then disconnects once the peer's DISCONNECT has come and
	// its own has completed (condPeerClosed), or rdma_cm reports the
	// peer gone: an rdmago peer sends that DISCONNECT only from Close,
	// which it reaches once its SHUTDOWN is acknowledged, and after it
	// waits for the acknowledgement only until rdma_cm reports this side
	// gone. Where the peer's DISCONNECT ended the connection, this side's
	// own is for a peer that waits for it as just said, and this side
	// still waits for rdma_cm alone (below).
	if awaitPeer && e.s.err == nil && e.s.ctrlAvail() {
		e.s.ctrlSeq++
		if err := e.postMsg(msg(opCtrl, ctrlDisconnect)); err != nil {
			e.fail(err)
		} else {
			e.sentEnd = true // awaitPeer said none was sent before
		}
	}
	mutual := awaitPeer && e.sentEnd && !e.s.peerDisconnect
	e.mu.Unlock()
	if mutual {
		if e.wait(dirClose, condPeerClosed) == nil {
			e.mu.Unlock()
		}
	} else if awaitPeer {
		// The peer ended the connection with a message and this side
		// sent none. The device completes a receive before it sends the
		// acknowledgement (rxe does), so disconnecting now could lose
		// the acknowledgement of that last message, and a peer waiting
		// for it (rsocket.c's rshutdown does) would retry it for ever.
		// The peer disconnects, or destroys its ID, once it has the
		// acknowledgement: wait for that, a moment at most.
		t := time.NewTimer(closeLinger)
		select {
		case <-e.cmGone:
		case <-t.C:
		}
		t.Stop()
	}
	e.deadlines.Stop()
	if e.stopWatch != nil {
		e.stopWatch()
		<-e.watchEnd
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeLinger)
	e.id.Disconnect(ctx)
	cancel()
	e.release()
	return e.id.Close()
}

// watch follows the connection's rdma_cm events (rsocket.c's connect
// service): a peer that disconnects, or that the keepalive finds gone,
// ends the connection, and the QP is flushed so that waits end.
func (e *endpoint) watch(ctx context.Context) {
	defer close(e.watchEnd)
	ch := e.id.Channel()
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return
		}
		switch ev.Type {
		case cm.EventDisconnected, cm.EventDeviceRemoval:
			e.cmGoneOnce.Do(func() { close(e.cmGone) })
		default:
			continue
		}
		e.mu.Lock()
		e.cmReportedGone = true
		if err := ev.Err(); err != nil {
			// The errno alone, as package net reports a connection's
			// failure ("read tcp a->b: connection timed out" when TCP's
			// keepalive gives up): the event says nothing more a caller
			// can act on.
			var errno syscall.Errno
			if errors.As(err, &errno) {
				err = errno
			}
			e.fail(err)
		} else {
			e.s.state = 0
		}
		e.mu.Unlock()
		e.id.Disconnect(ctx)
		e.kick()
	}
}

// startWatch starts watch.
func (e *endpoint) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stopWatch = cancel
	e.watchEnd = make(chan struct{})
	e.cmGone = make(chan struct{})
	go e.watch(ctx)
}
