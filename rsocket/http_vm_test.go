//go:build linux

package rsocket_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdma/rsocket"
)

// serveHTTP serves, over rsocket, two handlers: /sum answers the SHA-256 of
// the request's body, /data?n=N&seed=S answers N pseudo-random bytes.
func serveHTTP(t *testing.T) string {
	t.Helper()
	return serveHTTPTracked(t, nil)
}

// connLog keeps the connections of a test, client's and server's, so
// that a failing test logs each one's protocol state: a stall shows which
// side waits for what.
type connLog struct {
	mu    sync.Mutex
	conns []*rsocket.Conn
	sides []string
}

func (cl *connLog) add(side string, c net.Conn) {
	if rc, ok := c.(*rsocket.Conn); ok && cl != nil {
		cl.mu.Lock()
		cl.conns, cl.sides = append(cl.conns, rc), append(cl.sides, side)
		cl.mu.Unlock()
	}
}

// log logs every connection's state.
func (cl *connLog) log(t *testing.T) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for i, c := range cl.conns {
		t.Logf("%s connection %v -> %v: %s", cl.sides[i], c.LocalAddr(), c.RemoteAddr(), c.DebugState())
	}
}

func serveHTTPTracked(t *testing.T, cl *connLog) string {
	t.Helper()
	l := listen(t)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sum", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x\n", n, h.Sum(nil))
	})
	mux.HandleFunc("GET /data", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		seed, _ := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.CopyN(w, randReader(seed), n)
	})
	srv := &http.Server{Handler: mux, ConnState: func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cl.add("server", c)
		}
	}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// randReader is a reproducible stream of bytes.
func randReader(seed uint64) io.Reader { return rand.NewChaCha8(seedOf(seed)) }

func seedOf(s uint64) (b [32]byte) {
	for i := range b {
		b[i] = byte(s >> (8 * (i % 8)))
	}
	return b
}

func sumOf(seed uint64, n int64) string {
	h := sha256.New()
	io.CopyN(h, randReader(seed), n)
	return hex.EncodeToString(h.Sum(nil))
}

// net/http, client and server, over rsocket: 16 MiB and more each way,
// checked by SHA-256, on keep-alive connections.
func TestDeviceHTTP(t *testing.T) {
	var cl connLog
	addr := serveHTTPTracked(t, &cl)
	var d rsocket.Dialer
	client := &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, "rdma", addr)
				if err != nil {
					return nil, err // not c: a nil *rsocket.Conn is a non-nil net.Conn
				}
				cl.add("client", c)
				return c, nil
			},
		},
	}
	defer client.CloseIdleConnections()
	for i, n := range []int64{0, 1, 65536, 16 << 20, 17<<20 + 12345} {
		seed := uint64(i + 1)
		// Two thirds into the client's timeout, while both ends are
		// still open, a stalled request logs what each end waits for.
		stall := time.AfterFunc(2*client.Timeout/3, func() {
			t.Logf("%d bytes each way: stalled for %v", n, 2*client.Timeout/3)
			cl.log(t)
		})
		defer stall.Stop() // on the failures that end the test early
		resp, err := client.Post("http://"+addr+"/sum", "application/octet-stream", io.LimitReader(randReader(seed), n))
		if err != nil {
			t.Fatalf("POST %d bytes: %v", n, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("POST %d bytes: reading the answer: %v", n, err)
		}
		if want := fmt.Sprintf("%d %s\n", n, sumOf(seed, n)); string(body) != want {
			t.Errorf("POST %d bytes: server saw %q, want %q", n, body, want)
		}

		resp, err = client.Get(fmt.Sprintf("http://%s/data?n=%d&seed=%d", addr, n, seed))
		if err != nil {
			t.Fatalf("GET %d bytes: %v", n, err)
		}
		h := sha256.New()
		got, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %d bytes: %v", n, err)
		}
		if got != n || hex.EncodeToString(h.Sum(nil)) != sumOf(seed, n) {
			t.Errorf("GET %d bytes: got %d bytes, sum %x", n, got, h.Sum(nil))
		}
		stall.Stop()
	}
}

// rspreload is librdmacm's preload library, which turns a program's TCP
// sockets into rsockets, in Debian's library folder of this architecture.
var rspreload = "/usr/lib/" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + "-linux-gnu/rsocket/librspreload.so"

// A program that knows nothing of RDMA, curl, fetches from and posts to a Go
// net/http server over rsocket, its sockets turned into rsockets by
// librspreload.
func TestDevicePreloadedCurl(t *testing.T) {
	addr := serveHTTP(t)
	for _, p := range []string{rspreload, "/usr/bin/curl"} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("RDMAGO_VM") != "" {
				t.Fatalf("%v (the VM's tools are installed by hack/vm)", err)
			}
			t.Skip(err)
		}
	}
	curl := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/usr/bin/curl", append([]string{"-sS", "--fail", "--noproxy", "*"}, args...)...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+rspreload)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}
	const n = 4<<20 + 17
	const seed = 7
	f, err := os.Create(t.TempDir() + "/body")
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(f, randReader(seed), n)
	f.Close()
	if got, want := curl("--data-binary", "@"+f.Name(), "http://"+addr+"/sum"), fmt.Sprintf("%d %s\n", n, sumOf(seed, n)); got != want {
		t.Errorf("curl POST: server saw %q, want %q", got, want)
	}
	got := curl(fmt.Sprintf("http://%s/data?n=%d&seed=%d", addr, n, seed))
	if h := sha256.Sum256([]byte(got)); len(got) != n || hex.EncodeToString(h[:]) != sumOf(seed, n) {
		t.Errorf("curl GET: %d bytes, sum %x; want %d bytes, %s", len(got), h, n, sumOf(seed, n))
	}
}
