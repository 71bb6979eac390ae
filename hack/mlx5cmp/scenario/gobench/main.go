//go:build linux && amd64

// Command gobench is the Go half of mlx5cmp's speed anchor. It times
// rdmago's mlx5 provider, through the module's public packages only
// (uverbs, qp, wr, mr), posting and polling on mlx5_0 under mlx5cmp's fake
// mlx5 kernel: only the calls QP.PostSend and CQ.Poll, nothing of the fake
// device's work, which runs in the supervisor while the program is stopped
// in a marker's write.
//
// Its C twin is hack/mlx5cmp/scenario/bench.c: the same setup (goscen's
// setup and teardown, in package scen), the same requests, the same loop,
// the same output. Change one and you must change the other.
//
//	CGO_ENABLED=0 go build -o bin/mlx5cmp/bench-go ./hack/mlx5cmp/scenario/gobench
//	cd hack/mlx5cmp && mlx5cmp run -profile testdata/cx6.json -o /dev/null -- bench-go 20000
//
// Usage: bench-go N [K]. N signalled RDMA writes of 64 bytes with one SGE,
// posted one per PostSend (a single WQE of one basic block: the provider
// copies it to the BlueFlame register, as for perftest's ib_write_bw);
// after every K of them (default 64, at most the granted MaxSendWR) the
// program writes "posted" and "complete" to the marker descriptor, so the
// fake device records and executes the K requests and writes K CQEs, and
// then polls them, scen.PollBatch at a time (perftest's ctx_poll). One
// round of K untimed comes first. N is rounded down to a multiple of K.
//
// Timed: the runtime's monotonic clock (nanotime: clock_gettime
// CLOCK_MONOTONIC through the vDSO, as bench.c reads it) before and after
// each PostSend, and each Poll that returns completions; the sums are
// divided by the posts and by the completions. clock_ns is what an empty
// interval (two clock reads back to back) measures, included once in every
// timed post and every timed poll; subtract it for the calls alone. In the
// project's VM under the instruction-counting clock (vm run --icount) a
// nanosecond is a guest instruction, so the figures count instructions.
// The timed rounds must not allocate: the program counts the heap
// allocations over them and fails if there are any. Output, on stdout:
//
//	bench post_ns_per_call=P poll_ns_per_completion=C n=N polls=Q clock_ns=E
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	_ "unsafe" // go:linkname

	"github.com/rdmago/rdma/hack/mlx5cmp/scenario/scen"
	"github.com/rdmago/rdma/wr"
)

const (
	msgSize    = 64
	defaultK   = 64
	clockPairs = 10000
)

// ---- the benchmark ----

// nanotime is the runtime's monotonic clock: one clock_gettime
// (CLOCK_MONOTONIC) through the vDSO, the read bench.c makes. time.Now
// reads the wall clock too, a second vDSO call per read, which would make
// the clock's share of each timed interval larger on this side than on
// the C side. The runtime keeps nanotime reachable by linkname on purpose
// (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

var (
	markPosted   = []byte("posted")
	markComplete = []byte("complete")
)

// The totals of the timed rounds.
var postNS, pollNS, polls, completions int64

// round posts k writes one at a time, has the device execute them, and
// polls their k completions; with timed set it adds to the totals.
func round(w []wr.SendWR, wc []wr.Completion, k int, timed bool) {
	for i := range k {
		w[0].ID = uint64(i)
		t0 := nanotime()
		_, err := scen.QP.PostSend(w)
		t1 := nanotime()
		if err != nil {
			scen.Fail("post_send", err)
		}
		if timed {
			postNS += t1 - t0
		}
	}
	scen.MarkBytes(markPosted)
	scen.MarkBytes(markComplete)
	got := 0
	for p := 0; got < k; p++ {
		if p == scen.MaxPolls {
			scen.Fail("poll_timeout", syscall.ETIMEDOUT)
		}
		t0 := nanotime()
		n, err := scen.CQ.Poll(wc)
		t1 := nanotime()
		if err != nil {
			scen.Fail("poll_cq", err)
		}
		if n == 0 {
			continue
		}
		for i := range n {
			c := &wc[i]
			if c.Status != wr.Success || c.Opcode != wr.WCRDMAWrite || c.ID != uint64(got+i) {
				scen.Fail("wc", syscall.EIO)
			}
		}
		got += n
		if timed {
			pollNS += t1 - t0
			polls++
			completions += int64(n)
		}
	}
}

// clockCost returns the mean of clockPairs empty intervals.
func clockCost() float64 {
	var sum int64
	for range clockPairs {
		t0 := nanotime()
		t1 := nanotime()
		sum += t1 - t0
	}
	return float64(sum) / clockPairs
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bench-go N [K]")
	os.Exit(2)
}

func main() {
	scen.Prog, scen.Args = "bench-go", "N"
	if len(os.Args) != 2 && len(os.Args) != 3 {
		usage()
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n <= 0 {
		usage()
	}
	k := defaultK
	if len(os.Args) == 3 {
		if k, err = strconv.Atoi(os.Args[2]); err != nil || k <= 0 || k > scen.CQSize {
			usage()
		}
	}
	scen.Setup()
	if uint32(k) > scen.Caps.MaxSendWR {
		fmt.Fprintf(os.Stderr, "bench-go: K %d is more than MaxSendWR %d\n", k, scen.Caps.MaxSendWR)
		os.Exit(2)
	}
	scen.Mark("step bench")
	w := []wr.SendWR{{
		SGList: []wr.SGE{scen.MR0.SGE(0, msgSize)},
		Opcode: wr.OpRDMAWrite,
		Flags:  wr.Signaled,
		Remote: wr.Remote{Addr: scen.MR1.Addr(), RKey: scen.MR1.RKey()},
	}}
	wc := make([]wr.Completion, scen.PollBatch)
	round(w, wc, k, false)
	rounds := n / k
	// BENCH_GO_CPUPROFILE names a file for a CPU profile of the timed
	// rounds, from which a PGO build of bench-go is made (make
	// bench-mlx5cmp-pgo): what a program built with PGO gets from the
	// library. Profiling interrupts the rounds, so a profiled run's
	// figures are not the benchmark's.
	path := os.Getenv("BENCH_GO_CPUPROFILE")
	profiling := path != ""
	if profiling {
		f, err := os.Create(path)
		if err != nil {
			scen.Fail("cpuprofile", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			scen.Fail("cpuprofile", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	for range rounds {
		round(w, wc, k, true)
	}
	runtime.ReadMemStats(&ms)
	if d := ms.Mallocs - mallocs; d != 0 && !profiling { // the profile's writer allocates
		fmt.Fprintf(os.Stderr, "bench-go: %d heap allocations in %d timed rounds\n", d, rounds)
		os.Exit(1)
	}
	clk := clockCost()
	posts := int64(rounds * k)
	if posts == 0 {
		usage()
	}
	fmt.Printf("bench post_ns_per_call=%.1f poll_ns_per_completion=%.1f n=%d polls=%d clock_ns=%.1f\n",
		float64(postNS)/float64(posts), float64(pollNS)/float64(completions), posts, polls, clk)
	scen.Teardown()
	scen.Mark("end")
}
