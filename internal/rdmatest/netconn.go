package rdmatest

import (
	"errors"
	"io"
	"net"
	"testing"
)

// WaitModes runs f as two subtests, "poller" (direct false) and
// "WaitInKernel" (direct true): the two ways an rsocket or valkeyrdma
// connection waits, whose wake-ups, deadlines and Close take different
// paths.
func WaitModes(t *testing.T, f func(t *testing.T, direct bool)) {
	for _, direct := range []bool{false, true} {
		name := "poller"
		if direct {
			name = "WaitInKernel"
		}
		t.Run(name, func(t *testing.T) { f(t, direct) })
	}
}

// Pipe connects dial to an Accept on l, then closes l: the connected pair,
// in x/net/nettest's MakePipe shape, stop closing both.
func Pipe(l net.Listener, dial func(addr string) (net.Conn, error)) (c1, c2 net.Conn, stop func(), err error) {
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	c, err := dial(l.Addr().String())
	r := <-ch
	if err != nil || r.err != nil {
		if c != nil {
			c.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
		return nil, nil, nil, errors.Join(err, r.err)
	}
	return c, r.c, func() { c.Close(); r.c.Close() }, nil
}

// Transfer writes b on c and reads it whole on s into in.
func Transfer(c, s io.ReadWriter, b, in []byte) error {
	if _, err := c.Write(b); err != nil {
		return err
	}
	_, err := io.ReadFull(s, in)
	return err
}

// NoTransferAllocs fails t unless an n-byte Write on c and its Read on s
// allocate nothing, once 100 of them have run (past a connection's first
// credit or buffer updates).
func NoTransferAllocs(t testing.TB, c, s io.ReadWriter, n int) {
	t.Helper()
	b, in := make([]byte, n), make([]byte, n)
	for range 100 {
		if err := Transfer(c, s, b, in); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	allocs := testing.AllocsPerRun(500, func() {
		if e := Transfer(c, s, b, in); e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%d-byte Write and Read: %v allocations, want 0", n, allocs)
	}
}
