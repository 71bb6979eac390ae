//go:build linux && amd64

// Command gobench is the Go half of mlx5cmp's speed anchor. It times
// rdmago's mlx5 provider, through the module's public packages only
// (uverbs, qp, wr, mr), posting and polling on mlx5_0 under mlx5cmp's fake
// mlx5 kernel: only the calls QP.PostSend and CQ.Poll, nothing of the fake
// device's work, which runs in the supervisor while the program is stopped
// in a marker's write.
//
// Its C twin is hack/mlx5cmp/scenario/bench.c: the same setup (goscen's
// setup and teardown, copied), the same requests, the same loop, the same
// output. Change one and you must change the other.
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
// then polls them, pollBatch at a time (perftest's ctx_poll). One round of
// K untimed comes first. N is rounded down to a multiple of K.
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
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	_ "unsafe" // go:linkname

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	markFD     = 899
	bufSize    = 64 * 1024
	cqSize     = 256
	pollBatch  = 16
	maxPolls   = 100
	ibPort     = 1
	gidIndex   = 1
	msgSize    = 64
	defaultK   = 64
	clockPairs = 10000
)

// The objects of the common setup.
var (
	ctx      *uverbs.Context
	pd       *uverbs.PD
	buf0     []byte
	mr0, mr1 *mr.Region
	cq       *uverbs.CQ
	q        *uverbs.QP
	caps     qp.Caps // as granted
)

// ---- markers ----

// mark writes one marker line to markFD. Outside mlx5cmp the descriptor
// does not exist: say so and exit 2.
func mark(format string, args ...any) {
	markBytes([]byte(fmt.Sprintf(format, args...)))
}

// markBytes writes one marker line that is already bytes: the timed
// rounds' markers, which must not allocate.
func markBytes(line []byte) {
	n, err := syscall.Write(markFD, line)
	if err != nil || n != len(line) {
		if err == syscall.EBADF {
			fmt.Fprintf(os.Stderr, "bench-go: marker descriptor %d does not exist: run me under mlx5cmp (mlx5cmp run ... -- bench-go N)\n", markFD)
		} else {
			fmt.Fprintf(os.Stderr, "bench-go: marker write: %v (%d of %d bytes)\n", err, n, len(line))
		}
		os.Exit(2)
	}
}

// errnoOf returns the errno err wraps: 0 for nil, -1 for an error that
// wraps none.
func errnoOf(err error) int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// fail reports an unexpected failure of call name with err, then exits 1.
func fail(name string, err error) {
	mark("ret %s=%d", name, errnoOf(err))
	fmt.Fprintf(os.Stderr, "bench-go: %s: %v\n", name, err)
	os.Exit(1)
}

// ---- setup and teardown (goscen's) ----

func setup() {
	mark("step setup")

	// uverbs.Open covers ibv_get_device_list, the search for the name and
	// ibv_open_device.
	var err error
	ctx, err = uverbs.Open("mlx5_0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "scenario-go: open mlx5_0: %v\n", err)
		os.Exit(2)
	}

	// The GID: QueryGIDTable queries the device, each port, then the
	// whole table (rc.c makes the same calls); there is no single-entry
	// query like ibv_query_gid.
	ents, err := ctx.QueryGIDTable()
	if err != nil {
		fail("query_gid_table", err)
	}
	var dgid qp.GID
	found := false
	for _, e := range ents {
		if e.Port == ibPort && e.Index == gidIndex {
			dgid = e.GID
			found = true
		}
	}
	if !found {
		fail("gid_index_1", syscall.ENOENT)
	}

	pd, err = ctx.AllocPD()
	if err != nil {
		fail("alloc_pd", err)
	}

	access := wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic
	// mr.New allocates page-aligned zeroed memory and registers it
	// (rc.c: aligned_alloc, memset 0, ibv_reg_mr).
	if mr0, err = mr.New(pd, bufSize, access); err != nil {
		fail("reg_mr0", err)
	}
	if mr1, err = mr.New(pd, bufSize, access); err != nil {
		fail("reg_mr1", err)
	}
	buf0 = mr0.Bytes()
	for i := range buf0 {
		buf0[i] = byte(i*7 + 3)
	}

	if cq, err = ctx.CreateCQ(uverbs.CQAttr{CQE: cqSize}); err != nil {
		fail("create_cq", err)
	}

	q, err = pd.CreateQP(uverbs.QPInitAttr{
		Type:   qp.RC,
		SendCQ: cq,
		RecvCQ: cq,
		Caps: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4,
			MaxInlineData: 128},
		SignalAll: false,
	})
	if err != nil {
		fail("create_qp", err)
	}
	caps = q.Caps()
	mark("ret cap.max_send_wr=%d", caps.MaxSendWR)
	mark("ret cap.max_recv_wr=%d", caps.MaxRecvWR)
	mark("ret cap.max_send_sge=%d", caps.MaxSendSGE)
	mark("ret cap.max_recv_sge=%d", caps.MaxRecvSGE)
	mark("ret cap.max_inline_data=%d", caps.MaxInlineData)

	a := qp.Attr{
		State:         qp.StateInit,
		PKeyIndex:     0,
		PortNum:       ibPort,
		QPAccessFlags: wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic,
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		fail("modify_init", err)
	}

	a = qp.Attr{
		State:           qp.StateRTR,
		PathMTU:         qp.MTU1024,
		DestQPNum:       q.Num(),
		RQPSN:           0,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     12,
		AHAttr: qp.AHAttr{
			IsGlobal:  true,
			DGID:      dgid,
			SGIDIndex: gidIndex,
			HopLimit:  64,
			PortNum:   ibPort,
		},
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|
			qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|
			qp.AttrMinRNRTimer); err != nil {
		fail("modify_rtr", err)
	}

	a = qp.Attr{
		State:       qp.StateRTS,
		SQPSN:       0,
		Timeout:     14,
		RetryCnt:    7,
		RNRRetry:    7,
		MaxRdAtomic: 1,
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|
			qp.AttrSQPSN|qp.AttrMaxQPRdAtomic); err != nil {
		fail("modify_rts", err)
	}
}

func teardown() {
	mark("step teardown")
	// Move the QP to ERR first: QP.Close does that itself for a QP not in
	// RESET or ERR (so that outstanding requests flush, waiting for the
	// flush), which ibv_destroy_qp does not. Doing it explicitly on both
	// sides keeps the command sequences the same (Close then skips it).
	a := qp.Attr{State: qp.StateErr}
	if err := q.Modify(&a, qp.AttrState); err != nil {
		fail("modify_err", err)
	}
	if err := q.Close(); err != nil {
		fail("destroy_qp", err)
	}
	if err := cq.Close(); err != nil {
		fail("destroy_cq", err)
	}
	// Region.Close deregisters and frees (rc.c: ibv_dereg_mr each, then
	// free both).
	if err := mr0.Close(); err != nil {
		fail("dereg_mr0", err)
	}
	if err := mr1.Close(); err != nil {
		fail("dereg_mr1", err)
	}
	if err := pd.Close(); err != nil {
		fail("dealloc_pd", err)
	}
	if err := ctx.Close(); err != nil {
		fail("close_device", err)
	}
}

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
		_, err := q.PostSend(w)
		t1 := nanotime()
		if err != nil {
			fail("post_send", err)
		}
		if timed {
			postNS += t1 - t0
		}
	}
	markBytes(markPosted)
	markBytes(markComplete)
	got := 0
	for p := 0; got < k; p++ {
		if p == maxPolls {
			fail("poll_timeout", syscall.ETIMEDOUT)
		}
		t0 := nanotime()
		n, err := cq.Poll(wc)
		t1 := nanotime()
		if err != nil {
			fail("poll_cq", err)
		}
		if n == 0 {
			continue
		}
		for i := range n {
			c := &wc[i]
			if c.Status != wr.Success || c.Opcode != wr.WCRDMAWrite || c.ID != uint64(got+i) {
				fail("wc", syscall.EIO)
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
	if len(os.Args) != 2 && len(os.Args) != 3 {
		usage()
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n <= 0 {
		usage()
	}
	k := defaultK
	if len(os.Args) == 3 {
		if k, err = strconv.Atoi(os.Args[2]); err != nil || k <= 0 || k > cqSize {
			usage()
		}
	}
	setup()
	if uint32(k) > caps.MaxSendWR {
		fmt.Fprintf(os.Stderr, "bench-go: K %d is more than MaxSendWR %d\n", k, caps.MaxSendWR)
		os.Exit(2)
	}
	mark("step bench")
	w := []wr.SendWR{{
		SGList:     []wr.SGE{mr0.SGE(0, msgSize)},
		Opcode:     wr.OpRDMAWrite,
		Flags:      wr.Signaled,
		RemoteAddr: mr1.Addr(),
		RKey:       mr1.RKey,
	}}
	wc := make([]wr.Completion, pollBatch)
	round(w, wc, k, false)
	rounds := n / k
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	for range rounds {
		round(w, wc, k, true)
	}
	runtime.ReadMemStats(&ms)
	if d := ms.Mallocs - mallocs; d != 0 {
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
	teardown()
	mark("end")
}
