//go:build linux

package rsocket_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmago/rdma/internal/rdmatest"
)

// within tells that p lies inside buf.
func within(p, buf []byte) bool {
	if len(p) == 0 || len(buf) == 0 {
		return false
	}
	a, lo := uintptr(unsafe.Pointer(&p[0])), uintptr(unsafe.Pointer(&buf[0]))
	return a >= lo && a+uintptr(len(p)) <= lo+uintptr(len(buf))
}

// choppyReader reads from r in pieces of random sizes, up to what is asked,
// and records whether every buffer it was handed lay inside in.
type choppyReader struct {
	r      io.Reader
	in     []byte
	rng    *rand.Rand
	calls  int
	inside bool
}

func (c *choppyReader) Read(p []byte) (int, error) {
	if c.calls++; c.calls == 1 {
		c.inside = true
	}
	c.inside = c.inside && within(p, c.in)
	if len(p) > 1 {
		p = p[:1+c.rng.IntN(len(p))]
	}
	return c.r.Read(p)
}

// lendRecorder hashes what it is handed and records whether every buffer
// lay inside in.
type lendRecorder struct {
	h      io.Writer
	in     []byte
	calls  int
	inside bool
}

func (w *lendRecorder) Write(p []byte) (int, error) {
	if w.calls++; w.calls == 1 {
		w.inside = true
	}
	w.inside = w.inside && within(p, w.in)
	return w.h.Write(p)
}

// TestDeviceCopy moves data with io.Copy both ways, which goes through
// ReadFrom on the sending side and WriteTo on the receiving side, and
// checks that they hand the registered buffers themselves to the reader
// and the writer.
func TestDeviceCopy(t *testing.T) {
	for _, n := range []int64{0, 1, 65537, 8 << 20} {
		c, s := pair(t)
		sbuf, _ := c.Buffers()
		_, rbuf := s.Buffers()
		src := &choppyReader{r: io.LimitReader(randReader(uint64(n)), n), in: sbuf, rng: rand.New(rand.NewPCG(1, uint64(n)))}
		h := sha256.New()
		dst := &lendRecorder{h: h, in: rbuf}
		errc := make(chan error, 1)
		go func() {
			m, err := io.Copy(c, src)
			if err == nil && m != n {
				err = errors.New("short copy")
			}
			if err == nil {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		m, err := io.Copy(dst, s)
		if err != nil || m != n {
			t.Fatalf("%d bytes: received %d, %v", n, m, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%d bytes: send: %v", n, err)
		}
		if got, want := hex.EncodeToString(h.Sum(nil)), sumOf(uint64(n), n); got != want {
			t.Fatalf("%d bytes: checksum differs", n)
		}
		if src.calls > 0 && !src.inside {
			t.Errorf("%d bytes: ReadFrom handed the reader memory outside the send buffer", n)
		}
		if dst.calls > 0 && !dst.inside {
			t.Errorf("%d bytes: WriteTo handed the writer memory outside the receive ring", n)
		}
		t.Logf("%d bytes: %d reads into the send buffer, %d writes from the ring", n, src.calls, dst.calls)
	}
}

// TestDeviceWriteToShortWriter checks that bytes a writer does not take
// stay to be read, in order, and that its error comes back.
func TestDeviceWriteToShortWriter(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 5000)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	errFull := errors.New("full")
	var got []byte
	w := writerFunc(func(p []byte) (int, error) {
		got = append(got, p[:10]...)
		return 10, errFull
	})
	n, err := s.WriteTo(w)
	if n != 10 || !errors.Is(err, errFull) {
		t.Fatalf("WriteTo: %d, %v; want 10 and the writer's error", n, err)
	}
	rest := make([]byte, len(want)-10)
	if _, err := io.ReadFull(s, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), want) {
		t.Fatal("the bytes after a short write differ")
	}
	// A writer that panics gives the lend back: the bytes it had are read
	// again.
	if _, err := c.Write(want[:100]); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		s.WriteTo(writerFunc(func(p []byte) (int, error) { panic("writer") }))
	}()
	again := make([]byte, 100)
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(s, again); err != nil || !bytes.Equal(again, want[:100]) {
		t.Fatalf("read after a writer panicked: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// within5s fails the test unless f returns within a bound that no wait on
// user code meets.
func within5s(t *testing.T, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s waited on a blocked writer or reader", what)
		return nil
	}
}

// TestDeviceCloseDuringLend checks that Close does not wait for a WriteTo's
// writer or a ReadFrom's reader blocked in user code, that a Read coming
// meanwhile waits its turn and then sees the connection closed, and that
// the bytes lent stay readable after Close.
func TestDeviceCloseDuringLend(t *testing.T) {
	c, s := pair(t)
	msg := []byte("lent, then closed under the writer")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan []byte), make(chan struct{})
	wt := make(chan error, 1)
	go func() {
		_, err := s.WriteTo(writerFunc(func(p []byte) (int, error) {
			entered <- p
			<-release
			return len(p), nil
		}))
		wt <- err
	}()
	lent := <-entered
	rd := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 1))
		rd <- err
	}()
	if err := within5s(t, "Close", s.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	runtime.GC()
	if !bytes.Equal(lent, msg) {
		t.Fatalf("the bytes lent changed after Close: %q", lent)
	}
	close(release)
	if err := <-wt; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteTo after Close: %v, want net.ErrClosed", err)
	}
	if err := <-rd; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read that waited on the lend: %v, want net.ErrClosed", err)
	}

	// ReadFrom: CloseWrite while the reader is blocked ends the stream at
	// the peer; what the reader returns then is not sent.
	c2, s2 := pair(t)
	entered2, release2 := make(chan struct{}), make(chan struct{})
	rf := make(chan error, 1)
	go func() {
		_, err := c2.ReadFrom(readerFunc(func(p []byte) (int, error) {
			close(entered2)
			<-release2
			return copy(p, "too late"), nil
		}))
		rf <- err
	}()
	<-entered2
	if err := within5s(t, "CloseWrite", c2.CloseWrite); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	if got, err := io.ReadAll(s2); err != nil || len(got) != 0 {
		t.Fatalf("peer read %q, %v; want EOF at once", got, err)
	}
	close(release2)
	if err := <-rf; !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("ReadFrom after CloseWrite: %v, want EPIPE", err)
	}
	// And Close while the reader is blocked.
	entered3, release3 := make(chan struct{}), make(chan struct{})
	go func() {
		_, err := s2.ReadFrom(readerFunc(func(p []byte) (int, error) {
			close(entered3)
			<-release3
			return 0, io.EOF
		}))
		rf <- err
	}()
	<-entered3
	if err := within5s(t, "Close", s2.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(release3)
	if err := <-rf; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadFrom after Close: %v, want net.ErrClosed", err)
	}
}

// TestDeviceCopyAllocs checks that WriteTo and ReadFrom allocate nothing
// per message: 2,000 messages through each allocate no more than the
// error that ends the call.
func TestDeviceCopyAllocs(t *testing.T) {
	c, s := pair(t)
	const msgs, size = 2000, 4096
	chunk := make([]byte, size)
	// The reader hands over msgs*size bytes in all, counted in bytes:
	// ReadFrom may lend less than a chunk (where the send ring or the
	// peer's buffer ends), and a reader that counted calls would then
	// send less than the writer waits for.
	sent, left := 0, msgs*size
	src := readerFunc(func(p []byte) (int, error) {
		if left == 0 {
			return 0, io.EOF
		}
		n := copy(p, chunk[:min(len(chunk), left)])
		left -= n
		sent++
		return n, nil
	})
	received := 0
	dst := writerFunc(func(p []byte) (int, error) {
		received += len(p)
		if received == msgs*size {
			return len(p), errDone
		}
		return len(p), nil
	})
	// Warm up past the first credit updates.
	for range 50 {
		if err := rdmatest.Transfer(c, s, chunk, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	// A transfer that stops ends in a failure that says where each side
	// stood, not in the package's timeout: the watchdog records both
	// sides' state and closes them, which ends WriteTo.
	var stuck string
	watchdog := time.AfterFunc(60*time.Second, func() {
		stuck = fmt.Sprintf("after 60 s: received %d of %d bytes, %d left to send in %d reads so far\nsender: %s\nreceiver: %s",
			received, msgs*size, left, sent, c.DebugState(), s.DebugState())
		c.Close()
		s.Close()
	})
	defer watchdog.Stop()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() {
		_, err := c.ReadFrom(src)
		errc <- err
	}()
	_, err := s.WriteTo(dst)
	if !errors.Is(err, errDone) {
		select {
		case rerr := <-errc:
			t.Fatalf("WriteTo: %v; ReadFrom: %v\n%s", err, rerr, stuck)
		default:
			t.Fatalf("WriteTo: %v\n%s", err, stuck)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	runtime.ReadMemStats(&after)
	// The goroutine, its channel send and the error's wrapping allocate
	// a few times; one per message would be thousands.
	if n := after.Mallocs - before.Mallocs; n > 20 {
		t.Errorf("%d messages each way: %d allocations, want none per message", msgs, n)
	}
}

var errDone = errors.New("done")
