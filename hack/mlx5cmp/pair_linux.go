//go:build linux && amd64

package main

// Paired runs: two programs on one fake device, each under a supervisor
// of its own, sharing the kernel (one numbering of QPs, CQs and keys) and
// the device, which carries messages between their queues. Nothing tells
// the device when a program posts: it acts as the HCA does, on the
// doorbells. It watches the UAR pages of every open file; a store that
// names a QP (a doorbell or a BlueFlame copy, whose first word is the
// WQE's control segment) makes it execute that QP's send queue up to the
// doorbell record. A send that finds no receive posted waits for one, as
// a requester with an infinite RNR retry count does.
//
// This runs rdma-core's example programs (ibv_rc_pingpong on libmlx5)
// against rdmago's tools (rdmago rc_pingpong on its mlx5 provider): each
// side's driver must lay out what the other side's device model reads, and
// read back what the device wrote, for the data to arrive.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/hack/mlx5cmp/fake"
)

// pairOptions are the flags of "mlx5cmp pair".
type pairOptions struct {
	profile string
	port    int           // the first program listens here before the second starts
	timeout time.Duration // for both programs
	verbose bool
}

// runPair runs two programs on one fake device, the second once the
// first listens on o.port, and returns when both have exited.
func runPair(o pairOptions, argvs [2][]string) error {
	prof, dir, err := loadDevice(o.profile)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fab := newFabric(prof, nil)
	fab.dev.waitRNR = true
	var sups [2]*supervisor
	for i := range sups {
		tag := fmt.Sprintf("[%d] ", i)
		sups[i] = &supervisor{fab: fab, out: &transcript{}, files: map[int]*openFile{}, log: io.Discard,
			output: &linePrefixer{tag: tag, w: os.Stdout}}
		if o.verbose {
			sups[i].log = &linePrefixer{tag: tag, w: os.Stderr}
		}
	}

	// The device: it looks at the doorbells every 20 µs until both
	// programs have exited.
	stop := make(chan struct{})
	pumpErr := make(chan error, 1)
	go func() {
		t := time.NewTicker(20 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				pumpErr <- nil
				return
			case <-t.C:
			}
			fab.mu.Lock()
			err := fab.dev.pump()
			fab.mu.Unlock()
			if err != nil {
				for _, s := range sups {
					s.kill()
				}
				pumpErr <- fmt.Errorf("device: %w", err)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	done := make([]chan struct{}, 2)
	start := func(i int) {
		done[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			errs[i] = supervise(argvs[i], dir, sups[i])
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", argvs[i][0], errs[i])
			}
		}()
	}
	timer := time.AfterFunc(o.timeout, func() {
		for _, s := range sups {
			s.kill()
		}
	})
	defer timer.Stop()
	start(0)
	if err := waitListen(o.port, done[0], o.timeout); err != nil {
		errs[1] = err
	} else {
		start(1)
	}
	wg.Wait()
	for _, s := range sups {
		s.output.(*linePrefixer).Flush()
	}
	close(stop)
	err = <-pumpErr
	// What each program's queues did, for the caller to check that the
	// device carried the traffic (the programs print their own view).
	for i, s := range sups {
		if s.pid == 0 {
			continue
		}
		t := fab.dev.count(s.pid)
		fmt.Fprintf(os.Stderr, "mlx5cmp pair: [%d] %s: %d requests executed, %d messages received (%d bytes)\n",
			i, argvs[i][0], t.executed, t.received, t.bytesReceived)
	}
	if !timer.Stop() {
		err = errors.Join(err, fmt.Errorf("mlx5cmp: the pair ran past %v and was killed", o.timeout))
	}
	return errors.Join(errs[0], errs[1], err)
}

// kill ends the target, if it has started.
func (s *supervisor) kill() {
	if p := s.proc.Load(); p != nil {
		p.Kill()
	}
}

// waitListen returns once a TCP socket listens on port, or with an error
// when exited is closed first or the time is up.
func waitListen(port int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if listening(port) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("mlx5cmp: the first program exited before it listened on port %d", port)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mlx5cmp: nothing listened on port %d within %v", port, timeout)
		}
	}
}

// listening reports whether /proc/net/tcp or tcp6 shows a socket in
// state LISTEN (0A) on port.
func listening(port int) bool {
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "0A" {
				continue
			}
			_, p, ok := strings.Cut(fs[1], ":")
			if n, err := strconv.ParseUint(p, 16, 16); ok && err == nil && int(n) == port {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

// pump is one look of the device at its doorbells: it takes the stores
// made to the UAR pages since the last look, and executes the send queue
// of each QP they named up to the QP's doorbell record. A QP whose
// request waits for a receive stays named until it has caught up.
func (d *device) pump() error {
	d.sync()
	d.takeDoorbells()
	for _, q := range d.sortedQPs() {
		if !q.kicked || q.db == 0 {
			continue
		}
		var rec [4]byte
		if err := q.mem.ReadAt(rec[:], q.db+4); err != nil {
			if errors.Is(err, unix.ESRCH) {
				q.kicked = false // its process has exited
				continue
			}
			return fmt.Errorf("%s doorbell record: %w", q.key, err)
		}
		snd := uint16(be.Uint32(rec[:]))
		for uint16(q.sqDone) != snd {
			err := d.step(q)
			if errors.Is(err, errRNR) {
				break
			}
			if errors.Is(err, unix.ESRCH) {
				// The peer's process has exited: what was in flight to
				// it is lost with it.
				q.sqDone = uint32(snd)
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", q.key, err)
			}
		}
		if uint16(q.sqDone) == snd {
			q.kicked = false
		}
	}
	return nil
}

// takeDoorbells reads and clears the first word of every 64-byte block
// of the UAR pages' BlueFlame half, where drivers ring a QP's doorbell or
// copy its WQE: a word naming a known QP (the control segment's
// qpn_ds word is its second half) marks that QP. The word is cleared
// with a compare-and-swap so that a store made between the read and the
// clear is not lost.
func (d *device) takeDoorbells() {
	for _, p := range d.kern.uarPages() {
		for off := fake.BFOffset; off+64 <= len(p.mem); off += 64 {
			w := (*uint64)(unsafe.Pointer(&p.mem[off]))
			for {
				v := atomic.LoadUint64(w)
				if v == 0 {
					break
				}
				if !atomic.CompareAndSwapUint64(w, v, 0) {
					continue
				}
				var b [8]byte
				le.PutUint64(b[:], v) // the bytes as the driver stored them
				if q := d.qps[be.Uint32(b[4:])>>8]; q != nil {
					q.kicked = true
				}
				break
			}
		}
	}
}

// linePrefixer writes each whole line written to it to w with a tag in
// front, so that two programs' output reads apart. A last line without a
// newline is written when Flush is called.
type linePrefixer struct {
	mu   sync.Mutex
	tag  string
	w    io.Writer
	part []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := io.WriteString(p.w, p.tag+string(p.part[:i+1])); err != nil {
			return 0, err
		}
		p.part = p.part[i+1:]
	}
}

func (p *linePrefixer) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.part) > 0 {
		io.WriteString(p.w, p.tag+string(p.part)+"\n")
		p.part = nil
	}
}
