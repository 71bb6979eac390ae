//go:build linux

package valkeyrdma_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/valkeyrdma"
)

// valkeyBin returns the folder of valkey-server and rdma-test that `vm
// valkey` built: $RDMAGO_VALKEY_BIN, else the cache's. Under the VM runner
// their absence fails the test (make test builds them first).
func valkeyBin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RDMAGO_VALKEY_BIN")
	if dir == "" {
		cache := os.Getenv("RDMAGO_CACHE")
		if cache == "" {
			wd, _ := os.Getwd()
			cache = filepath.Join(filepath.Dir(wd), ".cache")
		}
		dir = filepath.Join(cache, "valkey", "trixie", "bin")
	}
	if _, err := os.Stat(filepath.Join(dir, "valkey-server")); err != nil {
		msg := fmt.Sprintf("no RDMA valkey-server: %v (run bin/vm valkey, or set RDMAGO_VALKEY_BIN)", err)
		if testenv.InVM() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// server is a valkey-server listening on the VM's address over TCP and
// RDMA.
type server struct {
	cmd       *exec.Cmd
	rdma, tcp string // host:port
	done      chan error
}

// nextPort hands out ports to the servers of one test binary.
var nextPort = 20000 + rand.IntN(20000)

// startServer starts valkey-server with its RDMA listener on the VM's
// address and waits until both listeners answer.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	rport := nextPort
	nextPort++
	return startServerOn(t, rport, args...)
}

// startServerOn is startServer with its RDMA listener on rport.
func startServerOn(t testing.TB, rport int, args ...string) *server {
	t.Helper()
	testenv.RequireDevice(t)
	bin := valkeyBin(t)
	tport := nextPort
	nextPort++
	ip := rdmatest.VMAddr.String()
	s := &server{
		rdma: netip.AddrPortFrom(rdmatest.VMAddr, uint16(rport)).String(),
		tcp:  netip.AddrPortFrom(rdmatest.VMAddr, uint16(tport)).String(),
		done: make(chan error, 1),
	}
	dir := t.TempDir()
	argv := append([]string{
		"--bind", ip, "--port", fmt.Sprint(tport),
		"--rdma-bind", ip, "--rdma-port", fmt.Sprint(rport),
		"--protected-mode", "no", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "valkey.log"),
	}, args...)
	s.cmd = exec.Command(filepath.Join(bin, "valkey-server"), argv...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "valkey.log"))
			t.Logf("valkey.log:\n%s", log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", s.tcp)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-s.done:
			t.Fatalf("valkey-server exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("valkey-server does not answer on %s: %v", s.tcp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rdmatest.WaitCMListening(t, rport)
	return s
}

// goRedis returns a go-redis client of the server over RDMA. It does not
// retry: a stalled command fails the test instead of going again.
func goRedis(t testing.TB, addr string, d *valkeyrdma.Dialer) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: addr, DialTimeout: 10 * time.Second, MaxRetries: -1}
	if d != nil {
		opt.Dialer = d.DialContext
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDeviceGoRedisSetGet(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := goRedis(t, s.rdma, &valkeyrdma.Dialer{})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 16, 1000, 64 << 10, 1<<20 - 100, 1 << 20, 3<<20 + 7} {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(rand.IntN(256))
		}
		key := fmt.Sprintf("k%d", n)
		if err := c.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatalf("SET %d bytes: %v", n, err)
		}
		got, err := c.Get(ctx, key).Bytes()
		if err != nil {
			t.Fatalf("GET %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("GET %d bytes: got %d bytes, not what was set", n, len(got))
		}
	}
	info, err := c.Info(ctx, "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "connected_clients:1") {
		t.Errorf("INFO clients:\n%s", info)
	}
}
