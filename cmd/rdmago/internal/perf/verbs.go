package perf

// The run of "rdmago perf" over the verbs API: what perftest's mains and
// perftest_resources.c do (ctx_init, set_up_connection, ctx_connect,
// ctx_set_send_wqes, ctx_set_recv_wqes and the run_iter_* loops), in the
// same order and with the same exchange steps, so that either side may be
// perftest.
//
// The measured loops allocate nothing: the work requests and their
// scatter-gather elements are built once and only their addresses and
// flags change; completions are polled in batches into one slice; time
// stamps go into slices sized before the loop.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tcpexch"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	perfPollBatch   = 16         // CTX_POLL_BATCH
	perfQKey        = 0x11111111 // DEF_QKEY
	perfUDAddition  = 40         // the GRH in front of a UD receive
	perfMinRNRTimer = 12
	// perfAllocsEnv, when set to 1, makes a run report on stderr how many
	// heap allocations its measured loops made (the device tests require
	// none).
	perfAllocsEnv = "RDMAGO_PERF_COUNT_ALLOCS"
)

// perfRun is one run: the options, the connection to the peer, the verbs
// objects and the data path's preallocated state.
type perfRun struct {
	o              perfOptions
	stdout, stderr io.Writer
	json           *perfJSONReport

	netConn net.Conn
	// netFD is netConn's descriptor, for peerGone's look at it without
	// allocating; -1 without one.
	netFD       int
	peekBuf     [1]byte
	conn        *perfConn
	peerVersion string
	// With -R: the exchange's rdma_cm connection and the test's IDs, one
	// per QP (see cm.go).
	cmComm *perfCMStream
	cmIDs  []*cm.ID

	// devCtx is the context this run opened when, with -R, the verbs
	// objects live on rdma_cm's own context of the device (uctx then);
	// nil otherwise.
	devCtx *uverbs.Context

	uctx   *uverbs.Context
	ch     *uverbs.CompChannel
	pd     *uverbs.PD
	mem    *mr.Memory
	buf    []byte
	mr     *uverbs.MR
	sendCQ *uverbs.CQ
	recvCQ *uverbs.CQ
	qps    []*uverbs.QP
	ahs    []*uverbs.AH
	port   uverbs.PortAttr
	gids   []uverbs.GIDEntry
	my     []perfDest
	rem    []perfDest

	// The buffer layout (alloc_ctx): per QP a send area of unit bytes
	// from the start, and the area peers write into (or that receives
	// take) in the second half.
	allocSize      uint64 // the message size the buffer was sized for
	unit           uint64 // BUFF_SIZE(allocSize, cycle buffer)
	sendQPBuffSize uint64

	// The data path.
	wrs       []wr.SendWR // numQPs × postList, each QP's list contiguous
	sges      []wr.SGE    // one per send work request
	rwrs      []wr.RecvWR // one per QP
	rsges     []wr.SGE
	rxBufAddr []uint64
	myAddr    []uint64
	remAddr   []uint64
	scnt      []uint64
	ccnt      []uint64
	wc        []wr.Completion
	rposted   int
	// Time stamps in ticks (perftest's tposted and tcompleted, in
	// cycles): now's counter, turned into nanoseconds by nanos once a
	// run is over. base and baseTicks are the same moment.
	base       time.Time
	baseTicks  uint64
	tposted    []uint64
	tcompleted []uint64
	// monoFirst and monoLast are the monotonic clock (since base) beside
	// a run's first post or receive stamp and after its loop: the
	// interval bwReport falls back on when the ticks are out of order.
	monoFirst, monoLast time.Duration
	clock               *perfClock
	// measured counts the iterations sampled in a timed (-D) run.
	measured uint64

	memStats    runtime.MemStats
	allocs      uint64
	countAllocs bool
}

// now is the time stamp of this moment, in ticks. Stamps start at
// tickOffset, never 0, which the reports would read as unset.
func (r *perfRun) now() uint64 { return ticks() - r.baseTicks + tickOffset }

const tickOffset = 1 << 30

// nanos turns stamps into nanoseconds, scaling by the ticks counted
// against the monotonic clock since the run began.
func (r *perfRun) nanos(stamps []uint64) []uint64 {
	out := make([]uint64, len(stamps))
	scale := 1.0
	if haveTicks {
		if n := ticks() - r.baseTicks; n > 0 {
			scale = float64(time.Since(r.base)) / float64(n)
		}
	}
	for i, t := range stamps {
		out[i] = uint64(float64(t) * scale)
	}
	return out
}

// failf prints a perftest message on stderr; the run then ends with
// status 1.
func (r *perfRun) failf(format string, args ...any) int {
	fmt.Fprintf(r.stderr, format+"\n", args...)
	return 1
}

// print writes perftest's stdout output, unless --json replaces it.
func (r *perfRun) print(s string) {
	if !r.o.json {
		io.WriteString(r.stdout, s)
	}
}

// full reports whether the header, addresses and table are printed
// (perftest's FULL_VERBOSITY, and not --json).
func (r *perfRun) full() bool { return r.o.output == perfOutFull && !r.o.json }

// main is perftest's main from the device list on. It returns the exit
// status.
func (r *perfRun) main(ctx context.Context) int {
	o := &r.o
	t := o.test
	r.base, r.baseTicks = time.Now(), ticks()
	r.countAllocs = os.Getenv(perfAllocsEnv) == "1"
	defer r.release()

	dev, status := r.findDevice()
	if status != 0 {
		return status
	}
	var err error
	if r.uctx, err = dev.Open(); err != nil {
		return r.stepFailf(err, " Couldn't get context for the device")
	}
	o.devName = dev.Name
	o.transport = perfTransportStr(dev.Transport)
	if status := r.checkLink(); status != 0 {
		return status
	}

	if r.full() && !o.client() {
		r.print(perfWaitingBanner)
	}
	if o.rdmaCM {
		if status := r.establishCM(ctx); status != 0 {
			return status
		}
	} else {
		if status := r.establish(ctx); status != 0 {
			return status
		}
		defer r.netConn.Close()
		stop := context.AfterFunc(ctx, func() { r.netConn.Close() })
		defer stop()
	}

	if r.peerVersion, err = r.conn.versions(); errors.Is(err, errPerfOldPeer) {
		return r.failf("Current implementation is not compatible with versions older than 5.70")
	} else if err != nil {
		return r.stepFailf(err, " Failed to exchange data between server and clients")
	}
	if o.cycleBuf, o.cacheLine, err = r.conn.sysData(os.Getpagesize(), perfCacheLineSize()); err != nil {
		return r.stepFailf(err, " Failed to exchange Page Size data between server and client")
	}
	if status := r.checkMTU(); status != 0 {
		return status
	}
	if o.rdmaCM {
		// perftest too makes its buffer, CQs and QPs on the context
		// rdma_cm opened (cma_id->verbs): rdma_cm's QPs must be.
		r.devCtx, r.uctx = r.uctx, r.cmComm.id.Verbs()
	}
	if status := r.init(); status != 0 {
		return status
	}
	if o.rdmaCM {
		if status := r.connectCM(ctx); status != 0 {
			return status
		}
	}
	if status := r.setUpConnection(); status != 0 {
		return status
	}
	if o.json {
		r.json = newPerfJSONReport(o, r.peerVersion)
	}
	if r.full() {
		r.print(perfTestInfo(o))
	}

	// The address exchange, which differs between the benchmarks.
	r.rem = make([]perfDest, o.numQPs)
	if t.verb == perfSend {
		if status := r.exchangeSend(); status != 0 {
			return status
		}
	} else if status := r.exchangeRDMA(); status != 0 {
		return status
	}

	if status := r.startKeepAlive(); status != 0 {
		return status
	}
	switch {
	case t.verb == perfSend && t.tst == perfBW:
		status = r.mainSendBW(ctx)
	case t.verb == perfSend:
		status = r.mainSendLat(ctx)
	case t.tst == perfBW:
		status = r.mainRDMABW(ctx)
	case t.verb == perfWrite:
		status = r.mainWriteLat(ctx)
	default:
		status = r.mainReadAtomicLat(ctx)
	}
	if status == 0 && r.json != nil {
		io.WriteString(r.stdout, r.json.text())
	}
	if r.countAllocs {
		fmt.Fprintf(r.stderr, "rdmago perf: heap allocations in the measured loops: %d\n", r.allocs)
	}
	if status != 0 {
		return status
	}
	r.linger()
	return r.close()
}

// perfLingerWait bounds linger's wait for the peer to go.
const perfLingerWait = 5 * time.Second

// linger keeps the RC QPs of the side of a latency test that ends by
// seeing the peer's last message (write_lat's server, send_lat's client:
// the other side sends first) until the peer is gone, its exchange socket
// closed or its rdma_cm connections disconnected, at most perfLingerWait.
// A device places a message before it acknowledges it: a side that
// destroyed its QP as soon as it saw the message could take the
// acknowledgement with it, and the peer, whose request then never
// completes, retransmits forever (rxe reads a retry count of 7,
// perftest's default, as infinite). perftest has that race, which CI
// caught with a perftest client hanging after rdmago's write_lat server
// had finished.
func (r *perfRun) linger() {
	o := &r.o
	if o.conn != perfRC || o.test.tst != perfLat {
		return
	}
	if !(o.test.verb == perfWrite && !o.client() || o.test.verb == perfSend && o.client()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), perfLingerWait)
	defer cancel()
	if r.netConn != nil {
		r.netConn.SetReadDeadline(time.Now().Add(perfLingerWait))
		var b [64]byte
		for {
			if _, err := r.netConn.Read(b[:]); err != nil {
				return
			}
		}
	}
	for _, id := range r.cmIDs {
		if !cmDisconnected(ctx, id) {
			return
		}
	}
}

// cmDisconnected reads id's events, acknowledging them, until its
// DISCONNECTED, and reports whether that came before ctx was done.
func cmDisconnected(ctx context.Context, id *cm.ID) bool {
	for {
		ev, err := id.Channel().GetEvent(ctx)
		if err != nil {
			return false
		}
		t := ev.Type
		ev.Ack()
		if t == cm.EventDisconnected {
			return true
		}
	}
}

// stepFailf reports a failed exchange step: its own line, then msg.
func (r *perfRun) stepFailf(err error, msg string) int {
	var se *perfStepError
	if errors.As(err, &se) {
		fmt.Fprintf(r.stderr, " %s (%v)\n", se.Text, se.Err)
	} else {
		fmt.Fprintf(r.stderr, "%v\n", err)
	}
	return r.failf("%s", msg)
}

// findDevice is ctx_find_dev: the device named by -d, or the first one.
func (r *perfRun) findDevice() (uverbs.Device, int) {
	devs, err := uverbs.Devices()
	if err != nil || len(devs) == 0 {
		fmt.Fprintf(r.stderr, " Did not detect devices \n If device exists, check if driver is up\n")
		return uverbs.Device{}, r.failf(" Unable to find the Infiniband/RoCE device")
	}
	devs = slices.Clone(devs)
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })
	if r.o.devName == "" {
		return devs[0], 0
	}
	for _, d := range devs {
		if d.Name == r.o.devName {
			return d, 0
		}
	}
	fmt.Fprintf(r.stderr, "IB device %s not found\n", r.o.devName)
	return uverbs.Device{}, r.failf(" Unable to find the Infiniband/RoCE device")
}

// perfPortStates are perftest's names of port states (sic: none for
// ACTIVE, which is never printed).
var perfPortStates = [...]string{"Nop", "Down", "Init", "Armed", "", "Active Defer"}

// checkLink is verify_params_with_device_context and check_link: the
// port must be up; Ethernet needs a GID; the inline size and the number
// of outstanding reads depend on the device.
func (r *perfRun) checkLink() int {
	o := &r.o
	t := o.test
	if o.events && o.eqNum > r.uctx.NumCompVectors() {
		fmt.Fprintf(r.stderr, " Completion vector specified is invalid\n Max completion vector = %d\n", r.uctx.NumCompVectors()-1)
		return r.failf(" Couldn't get context for the device")
	}
	var err error
	if r.port, err = r.uctx.QueryPort(uint8(o.ibPort)); err != nil {
		fmt.Fprintf(r.stderr, " Unable to query port %d attributes\n", o.ibPort)
		fmt.Fprintf(r.stderr, " Couldn't set the link layer\n")
		return r.failf(" Couldn't get context for the device")
	}
	if r.port.State != uverbs.PortActive {
		name := ""
		if int(r.port.State) < len(perfPortStates) {
			name = perfPortStates[r.port.State]
		}
		fmt.Fprintf(r.stderr, " Port number %d state is %s\n", o.ibPort, name)
		fmt.Fprintf(r.stderr, " Couldn't set the link layer\n")
		return r.failf(" Couldn't get context for the device")
	}
	switch r.port.LinkLayer {
	case uverbs.LinkLayerEthernet:
		o.linkType = "Ethernet"
		if o.gidIndex == -1 {
			o.gidIndex = 0
		}
	case uverbs.LinkLayerInfiniBand, uverbs.LinkLayerUnspecified:
		o.linkType = "IB"
	default:
		fmt.Fprintf(r.stderr, "Link layer on port %d is Unknown\n", o.ibPort)
		fmt.Fprintf(r.stderr, " Couldn't set the link layer\n")
		return r.failf(" Couldn't get context for the device")
	}

	attr, err := r.uctx.QueryDevice()
	known, inlineLat := perfKnownDevice(attr, err == nil)
	switch {
	case !known:
		if o.inline != -1 {
			r.print(perfResultLine)
			fmt.Fprintf(r.stderr, "Device not recognized to implement inline feature. Disabling it\n")
		}
		o.inline = 0
	case o.inline == -1 && t.tst == perfLat:
		switch {
		case t.verb == perfWrite:
			o.inline = 220
		case t.verb == perfSend && o.conn == perfUD:
			o.inline = 188
		case t.verb == perfSend:
			o.inline = 236
		default:
			o.inline = 0
		}
		if inlineLat > 0 {
			o.inline = inlineLat
		}
	case o.inline == -1:
		o.inline = 0
	}

	if t.verb == perfRead || t.verb == perfAtomic {
		maxReads := 0
		if err == nil {
			maxReads = attr.MaxQPRdAtom
		}
		switch {
		case o.outReads > maxReads:
			r.print(perfResultLine)
			fmt.Fprintf(r.stderr, " Number of outstanding reads is above max = %d\n Changing to that max value\n", maxReads)
			o.outReads = maxReads
		case o.outReads <= 0:
			o.outReads = maxReads
		}
	} else {
		o.outReads = 1
	}
	return 0
}

// perfKnownDevice approximates perftest's ib_dev_name: whether the device
// is one it knows to do inline sends, and an inline size of its own for
// latency tests (0: the default). Soft-RoCE is not one of them.
func perfKnownDevice(attr uverbs.DeviceAttr, ok bool) (bool, int) {
	if !ok {
		return false, 0
	}
	switch attr.VendorID {
	case 0x02c9, 0x15b3: // Mellanox, NVIDIA
		return true, 0
	case 0x8086: // Intel
		return true, 0
	case 0x14e4: // Broadcom NetXtreme
		return true, 96
	case 0x1d0f: // Amazon EFA
		return true, 32
	case 0x1077: // QLogic
		return true, 128
	}
	return false, 0
}

// perfCacheLineSize is get_cache_line_size.
func perfCacheLineSize() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 64
}

// establish is establish_connection over TCP: connect to the server, or
// accept one client.
func (r *perfRun) establish(ctx context.Context) int {
	o := &r.o
	if o.client() {
		addrs, err := net.DefaultResolver.LookupIP(ctx, "ip4", o.server)
		if err != nil {
			fmt.Fprintf(r.stderr, "%s for %s:%d\n", clib.GaiStrerror(err), o.server, o.port)
			fmt.Fprintf(r.stderr, "Problem in resolving basic address and port\n")
			return r.failf("Unable to open file descriptor for socket connection Unable to init the socket connection")
		}
		hosts := make([]string, len(addrs))
		for i, a := range addrs {
			hosts[i] = a.String()
		}
		if r.netConn = tcpexch.Dial(ctx, "tcp4", hosts, o.port); r.netConn == nil {
			fmt.Fprintf(r.stderr, "Couldn't connect to %s:%d\n", o.server, o.port)
			return r.failf("Unable to open file descriptor for socket connection Unable to init the socket connection")
		}
	} else {
		ln, err := tcpexch.Listen(ctx, "tcp4", o.port)
		if err != nil {
			fmt.Fprintf(r.stderr, "Couldn't listen to port %d\n", o.port)
			return r.failf("Unable to open file descriptor for socket connection Unable to init the socket connection")
		}
		r.netConn, err = tcpexch.AcceptOne(ctx, ln)
		if err != nil {
			fmt.Fprintf(r.stderr, "server accept: %v\naccept() failed\n", err)
			return r.failf("Unable to open file descriptor for socket connection Unable to init the socket connection")
		}
	}
	r.netFD = -1
	if sc, ok := r.netConn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { r.netFD = int(fd) })
		}
	}
	r.conn = &perfConn{rw: r.netConn, client: o.client()}
	return 0
}

// checkMTU is set_mtu and check_mtu: the path MTU (-m or the port's),
// agreed with the peer, and the UD message size it allows.
func (r *perfRun) checkMTU() int {
	o := &r.o
	cur := int(r.port.ActiveMTU)
	if o.mtu != 0 {
		m := clib.MTUEnum(int32(o.mtu))
		if m == 0 {
			fmt.Fprintf(r.stderr, " Invalid MTU - %d \n Please choose mtu from {256,512,1024,2048,4096}\n Will run with the port active mtu - %d\n", o.mtu, r.port.ActiveMTU)
		} else {
			cur = int(m)
			if cur > int(r.port.ActiveMTU) {
				r.print(fmt.Sprintf("Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", r.port.ActiveMTU))
				cur = int(r.port.ActiveMTU)
			}
		}
	}
	var err error
	if o.curMTU, err = r.conn.mtu(cur); err != nil {
		return r.stepFailf(err, " Failed to exchange data between server and clients")
	}
	if mtuBytes := uint64(1) << (7 + o.curMTU); o.conn == perfUD && o.size > mtuBytes {
		if o.runAll || !o.reqSize {
			fmt.Fprintf(r.stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtuBytes)
			o.size = mtuBytes
		} else {
			fmt.Fprintf(r.stderr, " Max message size in UD cannot be greater than MTU \n")
			return r.failf(" Couldn't get context for the device")
		}
	}
	return 0
}

// perfInc is perftest's INC: size rounded up to whole cache lines, at
// least one.
func perfInc(size, cacheLine uint64) uint64 {
	if size > cacheLine {
		return perfRoundUp(size, cacheLine)
	}
	return cacheLine
}

// init is alloc_ctx and ctx_init: the buffer and its registration, the
// CQs, and the QPs in INIT.
func (r *perfRun) init() int {
	o := &r.o
	t := o.test
	nq := uint64(o.numQPs)
	cycle, cl := uint64(o.cycleBuf), uint64(o.cacheLine)
	r.allocSize = o.size
	r.unit = max(r.allocSize, cycle)
	buffSize := perfInc(r.unit, cl) * 2 * nq
	r.sendQPBuffSize = buffSize / nq / 2
	if o.conn == perfUD {
		buffSize += cl
	}

	var err error
	if o.events {
		if r.ch, err = r.uctx.NewCompChannel(); err != nil {
			return r.failf("Couldn't create completion channel\n Couldn't create IB resources")
		}
	}
	if r.pd, err = r.uctx.AllocPD(); err != nil {
		return r.failf("Couldn't allocate PD\n Couldn't create IB resources")
	}
	if r.mem, err = mr.Alloc(int(buffSize)); err != nil {
		return r.failf("Couldn't allocate work buf.\nfailed to create mr\nFailed to create MR\n Couldn't create IB resources")
	}
	r.buf = r.mem.Bytes()[:buffSize]
	// Random contents, but for write_lat, which polls its buffer for
	// the peer's writes.
	if !(t.verb == perfWrite && t.tst == perfLat) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for i := 0; i+8 <= len(r.buf); i += 8 {
			v := rng.Uint64()
			for k := 0; k < 8; k++ {
				r.buf[i+k] = byte(v >> (8 * k))
			}
		}
	}
	access := wr.LocalWrite
	switch t.verb {
	case perfWrite:
		access |= wr.RemoteWrite
	case perfRead:
		access |= wr.RemoteRead
	case perfAtomic:
		access |= wr.RemoteAtomic
	}
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return r.failf("Couldn't allocate MR\nfailed to create mr\nFailed to create MR\n Couldn't create IB resources")
	}

	// The keepalive posts and polls from a goroutine of its own, and its
	// probe takes a send slot and a CQ entry.
	single, extra := o.keepAlive == 0, min(o.keepAlive, 1)
	if r.sendCQ, err = r.uctx.CreateCQ(uverbs.CQAttr{CQE: (o.txDepth + extra) * o.numQPs, Channel: r.ch, CompVector: o.eqNum, SingleThreaded: single}); err != nil {
		return r.failf("Couldn't create CQ\nFailed to create CQs\n Couldn't create IB resources")
	}
	r.recvCQ = r.sendCQ
	if t.verb == perfSend {
		if r.recvCQ, err = r.uctx.CreateCQ(uverbs.CQAttr{CQE: o.rxDepth * o.numQPs, Channel: r.ch, CompVector: o.eqNum, SingleThreaded: single}); err != nil {
			return r.failf("Couldn't create a receiver CQ\nFailed to create CQs\n Couldn't create IB resources")
		}
	}

	typ := qp.RC
	switch o.conn {
	case perfUC:
		typ = qp.UC
	case perfUD:
		typ = qp.UD
	}
	caps := r.qpCaps()
	// With -R, connectCM makes the QPs on their rdma_cm IDs.
	for i := 0; i < o.numQPs && !o.rdmaCM; i++ {
		q, err := r.pd.CreateQP(uverbs.QPInitAttr{Type: typ, SendCQ: r.sendCQ, RecvCQ: r.recvCQ, Caps: caps, SingleThreaded: o.keepAlive == 0})
		if err != nil {
			return r.failf("Unable to create QP.\nFailed to create QP.\n Couldn't create IB resources")
		}
		r.qps = append(r.qps, q)
		a := qp.Attr{State: qp.StateInit, PortNum: uint8(o.ibPort)}
		mask := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
		if o.conn == perfUD {
			a.QKey = perfQKey
			mask |= qp.AttrQKey
		} else {
			switch t.verb {
			case perfAtomic:
				a.QPAccessFlags = wr.RemoteAtomic
			case perfRead:
				a.QPAccessFlags = wr.RemoteRead
			case perfWrite:
				a.QPAccessFlags = wr.RemoteWrite
			case perfSend:
				a.QPAccessFlags = wr.RemoteWrite | wr.LocalWrite
			}
			mask |= qp.AttrAccessFlags
		}
		if err := q.Modify(a, mask); err != nil {
			// perftest says so and carries on; the QP then fails later.
			fmt.Fprintf(r.stderr, "Failed to modify QP to INIT, ret=%d\nFailed to modify QP to INIT\n", errnoOf(err))
		}
	}
	r.ahs = make([]*uverbs.AH, o.numQPs)

	// The data path's state, allocated once.
	pl := o.postList
	r.wrs = make([]wr.SendWR, o.numQPs*pl)
	r.sges = make([]wr.SGE, o.numQPs*pl)
	r.rwrs = make([]wr.RecvWR, o.numQPs)
	r.rsges = make([]wr.SGE, o.numQPs)
	r.rxBufAddr = make([]uint64, o.numQPs)
	r.myAddr = make([]uint64, o.numQPs)
	r.remAddr = make([]uint64, o.numQPs)
	r.scnt = make([]uint64, o.numQPs)
	r.ccnt = make([]uint64, o.numQPs)
	r.wc = make([]wr.Completion, perfPollBatch)
	n := uint64(1)
	if !o.noPeak {
		n = o.iters * nq
	}
	r.tposted = make([]uint64, max(n, 1))
	r.tcompleted = make([]uint64, max(n, 1))
	return 0
}

// errnoOf is the errno behind err, for perftest's "ret=%d".
func errnoOf(err error) int {
	var en interface{ Errno() uintptr }
	if errors.As(err, &en) {
		return int(en.Errno())
	}
	return -1
}

// setUpConnection is set_up_connection: the GID to use and the local
// addresses.
func (r *perfRun) setUpConnection() int {
	o := &r.o
	var gid [16]byte
	if o.gidIndex != -1 {
		var err error
		if r.gids, err = r.uctx.QueryGIDTable(); err != nil {
			return r.failf(" Unable to set up socket connection")
		}
		if !o.useGIDUser {
			o.gidIndex = perfBestGIDIndex(r.gids, o.ibPort, r.port.GIDTblLen, o.ipv6)
		}
		var ok bool
		if gid, ok = perfQueryGID(r.gids, o.ibPort, r.port.GIDTblLen, o.gidIndex); !ok {
			return r.failf(" Unable to set up socket connection")
		}
	}
	r.my = make([]perfDest, o.numQPs)
	for i, q := range r.qps {
		r.my[i] = perfDest{
			LID:      uint32(r.port.LID),
			OutReads: uint32(o.outReads),
			QPN:      q.Num(),
			PSN:      rand.Uint32() & 0xffffff,
			RKey:     r.mr.RKey(),
			VAddr:    r.mr.Addr() + (uint64(o.numQPs)+uint64(i))*r.unit,
			GID:      gid,
		}
	}
	return 0
}

// perfQueryGID is ibv_query_gid: the GID at index of the port's table,
// zeros for an empty entry, false past the table's end.
func perfQueryGID(gids []uverbs.GIDEntry, port, tblLen, index int) ([16]byte, bool) {
	if index < 0 || index >= tblLen {
		return [16]byte{}, false
	}
	for _, g := range gids {
		if int(g.Port) == port && int(g.Index) == index {
			return g.GID, true
		}
	}
	return [16]byte{}, true
}

// perfV4Mapped is perftest's ipv6_addr_v4mapped: ::ffff:a.b.c.d, or an
// IPv4-encoded multicast address.
func perfV4Mapped(g [16]byte) bool {
	w := func(i int) uint32 {
		return uint32(g[4*i])<<24 | uint32(g[4*i+1])<<16 | uint32(g[4*i+2])<<8 | uint32(g[4*i+3])
	}
	return (w(0)|w(1)|(w(2)^0xffff)) == 0 || (w(0) == 0xff0e0000 && (w(1)|(w(2)^0xffff)) == 0)
}

// perfBestGIDIndex is get_best_gid_index: without -x, perftest prefers an
// IPv4 GID (IPv6 with --ipv6), then RoCE v2 over v1.
func perfBestGIDIndex(gids []uverbs.GIDEntry, port, tblLen int, ipv6 bool) int {
	entry := func(i int) (uverbs.GIDEntry, bool) {
		for _, g := range gids {
			if int(g.Port) == port && int(g.Index) == i {
				return g, true
			}
		}
		return uverbs.GIDEntry{}, false
	}
	rate := func(t uverbs.GIDType) int {
		switch t {
		case uverbs.GIDTypeRoCEv1:
			return 1
		case uverbs.GIDTypeRoCEv2:
			return 2
		}
		return -1
	}
	best := 0
	for i := 1; i < tblLen; i++ {
		cur, curOK := entry(best)
		riv, rivOK := entry(i)
		v4, v4Riv := perfV4Mapped(cur.GID), perfV4Mapped(riv.GID)
		switch {
		case v4Riv && !v4 && !ipv6:
			best = i
		case !v4Riv && v4 && ipv6:
			best = i
		case !curOK || !rivOK:
			// ibv_query_gid_ex fails for an empty entry: perftest skips it.
		case rate(cur.Type) < rate(riv.Type):
			best = i
		}
	}
	return best
}

// handshake exchanges the address of QP i (or, as a mere synchronisation,
// QP 0's again).
func (r *perfRun) handshake(i int) error {
	d, err := r.conn.handshake(r.my[i], r.o.gidIndex != -1)
	if err != nil {
		return err
	}
	r.rem[i] = d
	return nil
}

// sync is a handshake that only synchronises the two sides. A measured
// loop starts after one; collecting the setup's garbage and returning the
// freed pages to the kernel first (as testing.B collects before timing)
// keeps a collection and the background scavenger out of the loop, which
// allocates nothing. It happens before the handshake, so that neither
// side is still collecting when the other starts sending.
func (r *perfRun) sync() int {
	debug.FreeOSMemory()
	return r.syncEnd()
}

// syncEnd is sync for a side that measures nothing next while its peer
// may: the server of write_bw, read_bw and atomic_bw, which waits out the
// client's loops. It collects nothing. A collection there ran while the
// client measured: on one CPU, about 1 ms inside a 68 ms loop of the
// write 64 B row, in the runs where the server got the CPU after the
// client had started (docs/performance.md, "The server's collection").
func (r *perfRun) syncEnd() int {
	if err := r.handshake(0); err != nil {
		return r.stepFailf(err, " Failed to exchange data between server and clients")
	}
	return 0
}

// checkGIDs is ctx_check_gid_compatibility.
func (r *perfRun) checkGIDs() int {
	if perfV4Mapped(r.my[0].GID) != perfV4Mapped(r.rem[0].GID) {
		fmt.Fprintf(r.stderr, "\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n\n")
		return 1
	}
	return 0
}

// printAddrs prints the local addresses, then exchanges the addresses
// again and prints the remote ones, as every benchmark does.
func (r *perfRun) printAddrs() int {
	o := &r.o
	for i := range r.my {
		if r.full() {
			r.print(perfAddrLines("local", r.my[i], o))
		}
		if r.json != nil {
			r.json.Local = append(r.json.Local, perfJSONDestOf(r.my[i], o))
		}
	}
	for i := range r.my {
		if err := r.handshake(i); err != nil {
			return r.stepFailf(err, " Failed to exchange data between server and clients")
		}
		if r.full() {
			r.print(perfAddrLines("remote", r.rem[i], o))
		}
		if r.json != nil {
			r.json.Remote = append(r.json.Remote, perfJSONDestOf(r.rem[i], o))
		}
	}
	return 0
}

// exchangeRDMA is the exchange of the write, read and atomic benchmarks:
// the addresses (the latency tests exchange QP 0's once more first), the
// connection, the addresses printed, and a last synchronisation.
func (r *perfRun) exchangeRDMA() int {
	if r.o.test.tst == perfLat {
		if status := r.sync(); status != 0 {
			return status
		}
	}
	if status := r.exchangeAndConnect(); status != 0 {
		return status
	}
	if status := r.printAddrs(); status != 0 {
		return status
	}
	return r.sync()
}

// exchangeSend is the exchange of the send benchmarks: the addresses, the
// connection, a synchronisation, and the addresses printed.
func (r *perfRun) exchangeSend() int {
	if status := r.exchangeAndConnect(); status != 0 {
		return status
	}
	if status := r.sync(); status != 0 {
		return status
	}
	return r.printAddrs()
}

// exchangeAndConnect trades each QP's address with the peer, then checks
// the GIDs and connects the QPs, unless rdma_cm did: the part both
// exchanges share.
func (r *perfRun) exchangeAndConnect() int {
	for i := range r.my {
		if err := r.handshake(i); err != nil {
			return r.stepFailf(err, "Failed to exchange data between server and clients")
		}
	}
	if r.o.rdmaCM {
		return 0
	}
	if status := r.checkGIDs(); status != 0 {
		return status
	}
	return r.connect()
}

// qpCaps is the test's QPs' capabilities: the queue depths asked for, and
// a send slot more for the keepalive's probe.
func (r *perfRun) qpCaps() qp.Caps {
	o := &r.o
	return qp.Caps{MaxSendWR: uint32(o.txDepth + min(o.keepAlive, 1)), MaxSendSGE: 1,
		MaxRecvWR: uint32(o.rxDepth), MaxRecvSGE: 1, MaxInlineData: uint32(o.inline)}
}

// startKeepAlive starts --keepalive's check on every QP that sends (the
// peer answers its probes whatever the test). A peer that goes silent
// moves the QP to the error state: the test's outstanding requests then
// complete flushed and it fails as on any completion error.
func (r *perfRun) startKeepAlive() int {
	ms := time.Duration(r.o.keepAlive) * time.Millisecond
	if ms == 0 {
		return 0
	}
	for _, q := range r.qps {
		if q.Type() != qp.RC || q.State() != qp.StateRTS {
			continue
		}
		err := q.SetKeepAlive(uverbs.KeepAlive{Interval: ms / 4, Timeout: ms - ms/4, OnDead: func(err error) {
			fmt.Fprintf(r.stderr, " Keepalive: %v\n", err)
		}})
		if err != nil {
			return r.failf(" Couldn't start the keepalive: %v", err)
		}
	}
	return 0
}

// connect is ctx_connect: each QP to RTR towards its peer, and to RTS on
// the sending side (a bandwidth server only receives); UD senders get an
// address handle.
func (r *perfRun) connect() int {
	o := &r.o
	sends := o.test.tst == perfLat || o.client()
	for i, q := range r.qps {
		dest, my := r.rem[i], r.my[i]
		ah := qp.AHAttr{DLID: uint16(dest.LID), SL: uint8(o.sl), PortNum: uint8(o.ibPort)}
		if o.gidIndex != -1 {
			ah.IsGlobal = true
			ah.DGID = dest.GID
			ah.SGIDIndex = uint8(o.gidIndex)
			ah.HopLimit = 0xff
			ah.TrafficClass = uint8(o.tclass)
		}
		a := qp.Attr{State: qp.StateRTR, AHAttr: ah}
		mask := qp.AttrState
		if o.conn != perfUD {
			a.PathMTU = qp.MTU(o.curMTU)
			a.DestQPNum = dest.QPN
			a.RQPSN = dest.PSN
			mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
			if o.conn == perfRC {
				a.MaxDestRdAtomic = uint8(my.OutReads)
				a.MinRNRTimer = perfMinRNRTimer
				mask |= qp.AttrMinRNRTimer | qp.AttrMaxDestRdAtomic
			}
		}
		if err := q.Modify(a, mask); err != nil {
			return r.failf("Failed to modify QP %d to RTR\n Unable to Connect the HCA's through the link", q.Num())
		}
		if sends {
			a := qp.Attr{State: qp.StateRTS, SQPSN: my.PSN}
			mask := qp.AttrState | qp.AttrSQPSN
			if o.conn == perfRC {
				a.Timeout = uint8(o.qpTimeout)
				a.RetryCnt = 7
				a.RNRRetry = 7
				a.MaxRdAtomic = uint8(dest.OutReads)
				mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
			}
			if err := q.Modify(a, mask); err != nil {
				return r.failf("Failed to modify QP to RTS\n Unable to Connect the HCA's through the link")
			}
			if o.conn == perfUD {
				var err error
				if r.ahs[i], err = r.pd.CreateAH(ah); err != nil {
					return r.failf("Failed to create AH\n Unable to Connect the HCA's through the link")
				}
			}
		}
	}
	return 0
}

// setSendWQEs is ctx_set_send_reg_wqes: the send work requests of each
// QP, a list of postList with every cqMod-th signaled, pointing into the
// send areas and, for RDMA, the peer's buffer.
func (r *perfRun) setSendWQEs() {
	o := &r.o
	t := o.test
	pl := o.postList
	size := o.size
	cycle, cl := uint64(o.cycleBuf), uint64(o.cacheLine)
	bw := t.tst == perfBW
	opcode := wr.OpSend
	switch t.verb {
	case perfWrite:
		opcode = wr.OpRDMAWrite
	case perfRead:
		opcode = wr.OpRDMARead
	case perfAtomic:
		opcode = wr.OpAtomicFetchAdd
		if o.atomicType == perfCmpAndSwap {
			opcode = wr.OpAtomicCmpAndSwp
		}
	}
	for i := range r.qps {
		r.scnt[i], r.ccnt[i] = 0, 0
		r.myAddr[i] = r.mr.Addr() + uint64(i)*r.unit
		if t.verb != perfSend {
			r.remAddr[i] = r.rem[i].VAddr
		}
		for j := 0; j < pl; j++ {
			k := i*pl + j
			s := &r.sges[k]
			s.Length = uint32(size)
			s.LKey = r.mr.LKey()
			w := &r.wrs[k]
			*w = wr.SendWR{ID: uint64(i), SGList: r.sges[k : k+1], Opcode: opcode}
			rdma := t.verb != perfSend
			if j == 0 {
				s.Addr = r.myAddr[i]
				if rdma {
					w.Remote.Addr = r.remAddr[i]
				}
			} else {
				s.Addr = r.sges[k-1].Addr
				if bw && size <= cycle/2 {
					s.Addr = perfNextAddr(s.Addr, size, uint64(j-1), r.myAddr[i], cl, cycle)
				}
				if rdma {
					w.Remote.Addr = r.wrs[k-1].Remote.Addr
					if (t.verb == perfAtomic && bw) || (bw && size <= cycle/2) {
						w.Remote.Addr = perfNextAddr(w.Remote.Addr, size, uint64(j-1), r.remAddr[i], cl, cycle)
					}
				}
			}
			if (j+1)%o.cqMod == 0 {
				w.Flags = wr.Signaled
			}
			if rdma {
				w.Remote.RKey = r.rem[i].RKey
			}
			if t.verb == perfAtomic {
				if o.atomicType == perfFetchAndAdd {
					w.CompareAdd = 1 // ATOMIC_ADD_VALUE
				} else {
					w.Swap = 0 // ATOMIC_SWAP_VALUE
				}
			}
			if t.verb == perfSend && o.conn == perfUD {
				w.AH = r.ahs[i]
				w.RemoteQPN = r.rem[i].QPN
				w.RemoteQKey = perfQKey
			}
			if (t.verb == perfSend || t.verb == perfWrite) && size <= uint64(o.inline) {
				w.Flags |= wr.Inline
			}
		}
	}
}

// perfNextAddr is increase_loc_addr and increase_rem_addr: the next
// message's address in a cycle of whole cache lines that wraps to prim
// after cycle bytes.
func perfNextAddr(addr, size, cnt, prim, cacheLine, cycle uint64) uint64 {
	inc := perfInc(size, cacheLine)
	return perfStepAddr(addr, cnt, prim, inc, cycle/inc)
}

// perfStepAddr is perfNextAddr with the step (perfInc) and the messages
// in a cycle worked out once, as runBW's loop does.
func perfStepAddr(addr, cnt, prim, inc, perCycle uint64) uint64 {
	addr += inc
	if (cnt+1)%perCycle == 0 {
		addr = prim
	}
	return addr
}

// setRecvWQEs is ctx_set_recv_wqes: rxDepth receives posted on each QP,
// into the second half of the buffer, UD ones with room for the GRH.
func (r *perfRun) setRecvWQEs() int {
	o := &r.o
	size := o.size
	cycle, cl := uint64(o.cycleBuf), uint64(o.cacheLine)
	r.rposted = o.rxDepth
	length := size
	if o.conn == perfUD {
		length += perfUDAddition
	}
	for i, q := range r.qps {
		addr := r.mr.Addr() + (uint64(o.numQPs)+uint64(i))*r.sendQPBuffSize
		if o.conn == perfUD {
			addr += cl - perfUDAddition
		}
		r.rxBufAddr[i] = addr
		r.rsges[i] = wr.SGE{Addr: addr, Length: uint32(length), LKey: r.mr.LKey()}
		r.rwrs[i] = wr.RecvWR{ID: uint64(i), SGList: r.rsges[i : i+1]}
		for j := 0; j < o.rxDepth; j++ {
			if _, err := q.PostRecv(r.rwrs[i : i+1]); err != nil {
				return r.failf("Couldn't post recv Qp = %d: counter=%d\n Failed to post receive recv_wqes", i, j)
			}
			if o.test.tst == perfBW && size <= cycle/2 {
				r.rsges[i].Addr = perfNextAddr(r.rsges[i].Addr, size, uint64(j), r.rxBufAddr[i], cl, cycle)
			}
		}
		r.rsges[i].Addr = r.rxBufAddr[i]
	}
	return 0
}

// Duration states (perftest's DurationStates).
const (
	perfStart int32 = iota
	perfSample
	perfStopSample
	perfEnd
)

// perfClock runs a timed (-D) test as perftest's SIGALRM handler does:
// margin seconds after it starts it begins sampling, margin seconds before
// the end it stops, and at the end the loops stop. One goroutine, made
// with its timer before the measured loop, moves the state and takes the
// two time stamps; the loop only reads the state and, once, signals the
// start, so a timed run allocates nothing either.
type perfClock struct {
	state      atomic.Int32
	start, end atomic.Uint64
	startCh    chan struct{}
	quit       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
}

// prepareClock makes the clock of a timed run, not started yet.
func (r *perfRun) prepareClock() {
	c := &perfClock{startCh: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	r.clock = c
	margin := time.Duration(r.o.margin) * time.Second
	sample := time.Duration(r.o.duration-2*r.o.margin) * time.Second
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	wait := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-c.quit:
			timer.Stop()
			return false
		}
	}
	go func() {
		defer close(c.done)
		select {
		case <-c.startCh:
		case <-c.quit:
			return
		}
		if !wait(margin) {
			return
		}
		c.start.Store(r.now())
		c.state.Store(perfSample)
		if !wait(sample) {
			return
		}
		c.end.Store(r.now())
		c.state.Store(perfStopSample)
		if !wait(margin) {
			return
		}
		c.state.Store(perfEnd)
	}()
}

// begin starts the clock (the first alarm(margin) of perftest).
func (c *perfClock) begin() {
	select {
	case c.startCh <- struct{}{}:
	default:
	}
}

// stopClock ends a timed run's goroutine and waits for it.
func (r *perfRun) stopClock() {
	if c := r.clock; c != nil {
		c.stopOnce.Do(func() { close(c.quit) })
		<-c.done
	}
}

// state is the duration state: perfStart for a run by iterations and
// before a timed run starts.
func (r *perfRun) state() int32 {
	if r.clock == nil {
		return perfStart
	}
	return r.clock.state.Load()
}

// waitCQ waits, with -e, until cq has a completion: it sleeps on the
// completion channel, acknowledging and re-arming each CQ whose event it
// takes (ctx_notify_events). Every CQ on the channel is armed whenever
// the loop sleeps, so no completion goes unnoticed.
func (r *perfRun) waitCQ(ctx context.Context, cq *uverbs.CQ, wc []wr.Completion) (int, error) {
	for {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		ev, err := r.ch.GetEventDirect(ctx)
		if err != nil {
			return 0, err
		}
		ev.AckEvents(1)
		if err := ev.ReqNotify(false); err != nil {
			return 0, err
		}
	}
}

// pollOne polls cq until it returns a completion (busy, or with -e on
// the completion channel), checking ctx now and then.
func (r *perfRun) pollOne(ctx context.Context, cq *uverbs.CQ) (*wr.Completion, error) {
	wc := r.wc[:1]
	if r.o.events {
		if _, err := r.waitCQ(ctx, cq, wc); err != nil {
			return nil, err
		}
		return &wc[0], nil
	}
	for spins := 1; ; spins++ {
		n, err := cq.Poll(wc)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return &wc[0], nil
		}
		if spins%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
}

// measure runs a measured loop: it makes and ends a timed run's clock
// around it, and counts the loop's heap allocations when perfAllocsEnv
// asks for it.
func (r *perfRun) measure(ctx context.Context, loop func(context.Context) error) error {
	if r.o.durationOn {
		r.prepareClock()
	}
	defer quietRuntime()()
	if r.countAllocs {
		runtime.ReadMemStats(&r.memStats)
		r.allocs -= r.memStats.Mallocs
	}
	err := loop(ctx)
	if r.countAllocs {
		runtime.ReadMemStats(&r.memStats)
		r.allocs += r.memStats.Mallocs
	}
	r.stopClock()
	return err
}

// compError prints a failed completion as perftest's NOTIFY_COMP_ERROR_*.
func (r *perfRun) compError(c *wr.Completion, side string, counts string) error {
	fmt.Fprintf(r.stderr, " Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n%s\n",
		side, int(c.Status), int32(c.ID), c.VendorErr, counts)
	return fmt.Errorf("completion with status %v", c.Status)
}

// runBW is run_iter_bw: post up to txDepth on each QP, lists of postList,
// every cqMod-th signaled; poll in batches; stamp each post and
// completion for the peak unless -N.
func (r *perfRun) runBW(ctx context.Context) error {
	o := &r.o
	nq := len(r.qps)
	pl := uint64(o.postList)
	cqMod := uint64(o.cqMod)
	iters := o.iters
	duration := o.durationOn
	totIters := iters * uint64(nq)
	cycle, cl := uint64(o.cycleBuf), uint64(o.cacheLine)
	size := o.size
	var totscnt, totccnt uint64
	r.measured = 0
	if duration {
		r.clock.begin()
	}
	if !duration && o.noPeak {
		r.tposted[0] = r.now()
	}
	// What the posting loop tests on every message is worked out here, and
	// each QP's send count is kept in a local while it posts. Go's calling
	// convention saves no register across the call to PostSend: a local
	// comes back in one load, a field of r through two and an index check.
	// Counted per message with callgrind: 236 instructions before, 168
	// after; perftest's run_iter_bw takes 156 (docs/performance.md).
	txDepth := uint64(o.txDepth)
	peak := !o.noPeak
	advance := pl == 1 && size <= cycle/2
	remote := o.test.verb != perfSend
	var inc, perCycle uint64
	if advance {
		inc = perfInc(size, cl)
		perCycle = cycle / inc
	}
	spins := 0
	r.monoFirst = time.Since(r.base)
	for totscnt < totIters || totccnt < totIters || (duration && r.state() != perfEnd) {
		for index := 0; index < nq; index++ {
			q := r.qps[index]
			list := r.wrs[index*int(pl) : (index+1)*int(pl)]
			w := &list[0]
			sc, cc := r.scnt[index], r.ccnt[index]
			for (sc < iters || duration) && sc-cc+pl <= txDepth {
				if pl == 1 && sc%cqMod == 0 && cqMod > 1 && !(!duration && sc == iters-1) {
					w.Flags &^= wr.Signaled
				}
				if peak {
					r.tposted[totscnt] = r.now()
				}
				if duration && r.state() == perfEnd {
					break
				}
				if _, err := q.PostSend(list); err != nil {
					r.scnt[index] = sc
					fmt.Fprintf(r.stderr, "Couldn't post send: qp %d scnt=%d \n", index, sc)
					return err
				}
				if advance {
					w.SGList[0].Addr = perfStepAddr(w.SGList[0].Addr, sc, r.myAddr[index], inc, perCycle)
					if remote {
						w.Remote.Addr = perfStepAddr(w.Remote.Addr, sc, r.remAddr[index], inc, perCycle)
					}
				}
				sc += pl
				totscnt += pl
				if pl == 1 && (sc%cqMod == cqMod-1 || (!duration && sc == iters-1)) {
					w.Flags |= wr.Signaled
				}
			}
			r.scnt[index] = sc
		}
		if totccnt < totIters || (duration && totccnt < totscnt) {
			var ne int
			var err error
			if o.events {
				ne, err = r.waitCQ(ctx, r.sendCQ, r.wc)
			} else {
				ne, err = r.sendCQ.Poll(r.wc)
			}
			if err != nil {
				fmt.Fprintf(r.stderr, "poll CQ failed %d\n", -1)
				return err
			}
			for i := 0; i < ne; i++ {
				c := &r.wc[i]
				if c.Status != wr.Success {
					return r.compError(c, "client", fmt.Sprintf("scnt=%d, ccnt=%d", totscnt, totccnt))
				}
				r.ccnt[c.ID] += cqMod
				totccnt += cqMod
				if !o.noPeak {
					if totccnt > totIters {
						r.tcompleted[totIters-1] = r.now()
					} else {
						r.tcompleted[totccnt-1] = r.now()
					}
				}
				r.sample(cqMod)
			}
			if ne == 0 {
				if spins++; spins%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
		}
	}
	if o.noPeak && !duration {
		r.tcompleted[0] = r.now()
	}
	r.monoLast = time.Since(r.base)
	return nil
}

// runBWServer is run_iter_bw_server: count receives, repost each consumed
// receive while more messages are due, and time from the first receive.
func (r *perfRun) runBWServer(ctx context.Context) error {
	o := &r.o
	nq := len(r.qps)
	duration := o.durationOn
	iters := o.iters
	totIters := iters * uint64(nq)
	cycle, cl := uint64(o.cycleBuf), uint64(o.cacheLine)
	recvSize := o.size
	if o.conn == perfUD {
		recvSize += perfUDAddition
	}
	rcntQP := make([]uint64, nq)
	unused := make([]uint64, nq)
	posted := make([]uint64, nq)
	for i := range posted {
		posted[i] = uint64(r.rposted)
	}
	var rcnt uint64
	firstRx := true
	r.measured = 0
	lastProgress := time.Now()
	spins := 0
	for rcnt < totIters || (duration && r.state() != perfEnd) {
		if duration && r.state() == perfEnd {
			break
		}
		var ne int
		var err error
		if o.events {
			ne, err = r.waitCQ(ctx, r.recvCQ, r.wc)
		} else {
			ne, err = r.recvCQ.Poll(r.wc)
		}
		if err != nil {
			fmt.Fprintf(r.stderr, "Poll Receive CQ failed %d\n", -1)
			return err
		}
		if ne == 0 {
			if spins++; spins%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				if !duration && time.Since(lastProgress) > 120*time.Second {
					fmt.Fprintf(r.stderr, " Did not get Message for 120 Seconds, exiting..\n Total Received=%d, Total Iters Required=%d\n", rcnt, totIters)
					return errors.New("no message for 120 seconds")
				}
			}
			continue
		}
		if firstRx {
			firstRx = false
			if duration {
				r.clock.begin()
			} else {
				r.tposted[0] = r.now()
				r.monoFirst = time.Since(r.base)
			}
		}
		if !duration && spins != 0 {
			lastProgress = time.Now()
			spins = 0
		}
		for i := 0; i < ne; i++ {
			c := &r.wc[i]
			id := c.ID
			if c.Status != wr.Success {
				return r.compError(c, "server", fmt.Sprintf(" rcnt=%d", rcntQP[id]))
			}
			rcntQP[id]++
			rcnt++
			unused[id]++
			r.sample(1)
			if (duration || posted[id]+1 <= iters) && unused[id] >= 1 {
				if _, err := r.qps[id].PostRecv(r.rwrs[id : id+1]); err != nil {
					fmt.Fprintf(r.stderr, "Couldn't post recv Qp=%d rcnt=%d\n", id, rcntQP[id])
					return err
				}
				unused[id]--
				posted[id]++
				if recvSize <= cycle/2 {
					r.rsges[id].Addr = perfNextAddr(r.rsges[id].Addr, o.size, posted[id], r.rxBufAddr[id], cl, cycle)
				}
			}
		}
	}
	if !duration {
		r.tcompleted[0] = r.now()
		r.monoLast = time.Since(r.base)
	}
	return nil
}

// bwReport is print_report_bw's figures for the last run.
func (r *perfRun) bwReport() perfBWReport {
	o := &r.o
	in := perfBWInput{
		size: o.size, iters: o.iters, numQPs: o.numQPs, postList: o.postList,
		cqMod: o.cqMod, noPeak: o.noPeak, duration: o.durationOn, gbits: o.reportG,
	}
	last := r.lastStamp()
	switch {
	case o.durationOn:
		in.iters = r.measured
		in.tposted = r.nanos([]uint64{r.clock.start.Load()})
		in.tcompleted = r.nanos([]uint64{r.clock.end.Load()})
	case r.tcompleted[last] <= r.tposted[0]:
		// The stamps say the last completion came before the first
		// post, or was never taken: the counter cannot time this run
		// (perftest then prints a row of zeros; CI saw rdmago print one
		// once, as the client of ib_read_bw -R with 200 messages). The
		// monotonic clock beside the loop still can, with no
		// per-message peak, as with -N.
		fmt.Fprintf(r.stderr, "%s (first post %d, last completion %d ticks): figures from the monotonic clock, no peak\n",
			perfStampsWarning, r.tposted[0], r.tcompleted[last])
		in.noPeak = true
		in.tposted = []uint64{uint64(r.monoFirst)}
		in.tcompleted = []uint64{uint64(r.monoLast)}
	default:
		in.tposted, in.tcompleted = r.nanos(r.tposted), r.nanos(r.tcompleted)
	}
	return perfComputeBW(in)
}

// perfStampsWarning begins the line bwReport prints when a run's stamps
// are out of order.
const perfStampsWarning = " Warning: time stamps out of order"

// lastStamp is the index of the completion stamp that ends a run in
// perfComputeBW: o.iters messages on each QP, or with -N the one stamp.
func (r *perfRun) lastStamp() int {
	if r.o.noPeak {
		return 0
	}
	return min(int(r.o.iters)*r.o.numQPs, len(r.tcompleted)) - 1
}

// printBW prints a bandwidth row (or adds it to the JSON report) and
// checks it against -w and -y.
func (r *perfRun) printBW(rep perfBWReport, by string) bool {
	if r.json != nil {
		r.json.addBW(rep, by)
	} else {
		r.print(perfBWRow(&r.o, rep))
	}
	ok := true
	if r.o.limitBWOn && float64(r.o.limitBW) > rep.BWAvg {
		ok = false
	}
	if r.o.limitMROn && float64(r.o.limitMR) > rep.MsgRate {
		ok = false
	}
	return ok
}

// checkLimits reports a result below -w or -y.
func (r *perfRun) checkLimits(ok bool) int {
	if ok {
		return 0
	}
	if r.o.limitBWOn {
		return r.failf("Error: BW result is below bw limit")
	}
	return r.failf("Error: Msg rate  is below msg_rate limit")
}

// perfSizes are the message sizes of a run: the one asked for, or with
// -a the powers of two from 2 up to and including 2^(maxPow-1).
func (r *perfRun) perfSizes(maxPow int) []uint64 {
	if !r.o.runAll {
		return []uint64{r.o.size}
	}
	var s []uint64
	for i := 1; i < maxPow; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// mainRDMABW is the rest of write_bw, read_bw and atomic_bw: the client
// measures and sends its figures, which the server prints.
func (r *perfRun) mainRDMABW(ctx context.Context) int {
	o := &r.o
	if r.full() {
		r.print(perfTableHeader(o))
	}
	if !o.client() {
		if status := r.syncEnd(); status != 0 {
			return status
		}
		rem, err := r.conn.bwReport(perfBWReport{})
		if err != nil {
			return r.stepFailf(err, " Failed to exchange data between server and clients")
		}
		r.printBW(rem, "remote")
		if status := r.closeConnection(); status != 0 {
			return status
		}
		if r.full() {
			r.print(perfResultLine)
		}
		return 0
	}
	if o.events {
		if err := r.sendCQ.ReqNotify(false); err != nil {
			return r.failf("Couldn't request CQ notification")
		}
	}
	var last perfBWReport
	ok := true
	for _, size := range r.perfSizes(24) {
		o.size = size
		r.setSendWQEs()
		err := r.measure(ctx, r.runBW)
		if err != nil {
			return r.failf(" Failed to complete run_iter_bw function successfully")
		}
		last = r.bwReport()
		ok = r.printBW(last, "local") && ok
	}
	if r.full() {
		r.print(perfResultLine)
	}
	if status := r.sync(); status != 0 {
		return status
	}
	if _, err := r.conn.bwReport(last); err != nil {
		return r.stepFailf(err, " Failed to exchange data between server and clients")
	}
	if status := r.closeConnection(); status != 0 {
		return status
	}
	return r.checkLimits(ok)
}

// mainSendBW is the rest of send_bw: both sides run, the client sending,
// the server receiving, and each prints its own figures.
func (r *perfRun) mainSendBW(ctx context.Context) int {
	o := &r.o
	if o.events {
		if r.sendCQ.ReqNotify(false) != nil || r.recvCQ.ReqNotify(false) != nil {
			return r.failf(" Couldn't request CQ notification")
		}
	}
	if r.full() {
		r.print(perfTableHeader(o))
	}
	maxPow := 24
	if o.conn == perfUD {
		maxPow = 7 + o.curMTU + 1
	}
	ok := true
	for _, size := range r.perfSizes(maxPow) {
		o.size = size
		if o.client() {
			r.setSendWQEs()
		} else if status := r.setRecvWQEs(); status != 0 {
			return status
		}
		if status := r.sync(); status != 0 {
			return status
		}
		loop := r.runBWServer
		if o.client() {
			loop = r.runBW
		}
		if err := r.measure(ctx, loop); err != nil {
			return 17
		}
		ok = r.printBW(r.bwReport(), "local") && ok
		if o.runAll {
			if status := r.sync(); status != 0 {
				return status
			}
		}
	}
	if r.full() {
		r.print(perfResultLine)
	}
	if status := r.closeConnection(); status != 0 {
		fmt.Fprintf(r.stderr, " Failed to close connection between server and client\n Trying to close this side resources\n")
	}
	return r.checkLimits(ok)
}

// rttFactor is 2 for the ping-pong latencies (send, write), 1 for a
// request and its answer (read, atomic).
func (r *perfRun) rttFactor() int {
	if r.o.test.verb == perfRead || r.o.test.verb == perfAtomic {
		return 1
	}
	return 2
}

// printLat prints a latency row for the last run (or adds it to the JSON
// report).
func (r *perfRun) printLat() {
	o := &r.o
	if o.durationOn {
		span := r.nanos([]uint64{r.clock.end.Load() - r.clock.start.Load()})[0]
		rep := perfComputeLatDur(o.size, r.measured, span, r.rttFactor())
		if r.json != nil {
			r.json.addLatDur(rep)
		} else {
			r.print(perfLatDurRow(o, rep))
		}
		return
	}
	rep := perfComputeLat(o.size, r.nanos(r.tposted[:o.iters]), r.rttFactor())
	if r.json != nil {
		r.json.addLat(rep)
	} else {
		r.print(perfLatRows(o, rep))
	}
}

// mainWriteLat is the rest of write_lat: both sides ping-pong RDMA
// writes, each polling its buffer for the other's.
func (r *perfRun) mainWriteLat(ctx context.Context) int {
	o := &r.o
	r.setSendWQEs()
	if r.full() {
		r.print(perfTableHeader(o))
	}
	for _, size := range r.perfSizes(24) {
		o.size = size
		err := r.measure(ctx, r.runLatWrite)
		if err != nil {
			return r.failf("Test exited with Error")
		}
		r.printLat()
	}
	if r.full() {
		r.print(perfResultLine)
	}
	return 0
}

// mainReadAtomicLat is the rest of read_lat and atomic_lat: only the
// client works; the server waits for it to finish.
func (r *perfRun) mainReadAtomicLat(ctx context.Context) int {
	o := &r.o
	if !o.client() {
		if status := r.closeConnection(); status != 0 {
			return status
		}
		if r.full() {
			r.print(perfResultLine)
		}
		return 0
	}
	if o.events {
		if err := r.sendCQ.ReqNotify(false); err != nil {
			return r.failf("Couldn't request CQ notification")
		}
	}
	if r.full() {
		r.print(perfTableHeader(o))
	}
	r.setSendWQEs()
	for _, size := range r.perfSizes(24) {
		o.size = size
		err := r.measure(ctx, r.runLat)
		if err != nil {
			return 17
		}
		r.printLat()
	}
	if status := r.closeConnection(); status != 0 {
		return status
	}
	if r.full() {
		r.print(perfResultLine)
	}
	return 0
}

// mainSendLat is the rest of send_lat: both sides ping-pong sends.
func (r *perfRun) mainSendLat(ctx context.Context) int {
	o := &r.o
	if o.events {
		if r.sendCQ.ReqNotify(false) != nil || r.recvCQ.ReqNotify(false) != nil {
			return r.failf("Couldn't request RCQ notification")
		}
	}
	if r.full() {
		r.print(perfTableHeader(o))
	}
	r.setSendWQEs()
	maxPow := 24
	if o.conn == perfUD {
		maxPow = 7 + o.curMTU + 1
	}
	for _, size := range r.perfSizes(maxPow) {
		o.size = size
		if status := r.setRecvWQEs(); status != 0 {
			return status
		}
		if status := r.sync(); status != 0 {
			return status
		}
		err := r.measure(ctx, r.runLatSend)
		if err != nil {
			return 17
		}
		r.printLat()
	}
	if r.full() {
		r.print(perfResultLine)
	}
	if status := r.closeConnection(); status != 0 {
		fmt.Fprintf(r.stderr, "Failed to close connection between server and client\n Trying to close this side resources\n")
	}
	return 0
}

// closeConnection is ctx_close_connection: a last handshake, then "done".
func (r *perfRun) closeConnection() int {
	if err := r.handshake(0); err != nil {
		return r.stepFailf(err, "Failed to close connection between server and client")
	}
	if err := r.conn.done(); err != nil {
		fmt.Fprintf(r.stderr, " Client write: %v\nCouldn't write to socket\n", err)
		return r.failf("Failed to close connection between server and client")
	}
	return 0
}

// perfLoadByte reads buf[i] with an atomic load of the aligned word that
// holds it: the peer's RDMA write changes it behind the compiler's back.
func perfLoadByte(buf []byte, i int) byte {
	w := i &^ 3
	v := atomic.LoadUint32((*uint32)(unsafe.Pointer(&buf[w])))
	return byte(v >> (8 * uint(i-w))) // little endian
}

// runLatWrite is run_iter_lat_write: the server writes first; each side
// waits until the byte at the end of the peer's last message shows the
// iteration number, then writes its own.
func (r *perfRun) runLatWrite(ctx context.Context) error {
	o := &r.o
	r.latWR(wr.Signaled, true)
	postOff := int(o.size - 1)
	pollOff := int(uint64(o.numQPs)*r.unit + o.size - 1)
	duration := o.durationOn
	iters := o.iters
	var scnt, ccnt, rcnt uint64
	r.measured = 0
	if duration {
		r.clock.begin()
	}
	for scnt < iters || ccnt < iters || rcnt < iters || (duration && r.state() != perfEnd) {
		if (rcnt < iters || duration) && !(scnt < 1 && !o.client()) {
			rcnt++
			for spins := 1; perfLoadByte(r.buf, pollOff) != byte(rcnt) && r.state() != perfEnd; spins++ {
				if spins%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
		}
		if scnt < iters || duration {
			if !duration {
				r.tposted[scnt] = r.now()
			}
			scnt++
			r.buf[postOff] = byte(scnt)
			if err := r.postLat("Couldn't post send: scnt=%d\n", scnt); err != nil {
				return err
			}
		}
		if duration && r.state() == perfEnd {
			break
		}
		if ccnt < iters || duration {
			last := !duration && scnt == iters && ccnt+1 == iters
			if ok, err := r.pollLat(ctx, duration, last, "poll CQ", scnt, ccnt); !ok {
				return err // nil: a timed run's time is over
			}
			ccnt++
			r.sample(1)
		}
	}
	return nil
}

// runLat is run_iter_lat (read and atomic): one request at a time, each
// waited for.
func (r *perfRun) runLat(ctx context.Context) error {
	o := &r.o
	r.latWR(wr.Signaled, false) // reads and atomics are never inline
	duration := o.durationOn
	var scnt uint64
	r.measured = 0
	if duration {
		r.clock.begin()
	}
	for scnt < o.iters || (duration && r.state() != perfEnd) {
		if !duration {
			r.tposted[scnt] = r.now()
			scnt++
		}
		if err := r.postLat("Couldn't post send: scnt=%d\n", scnt); err != nil {
			return err
		}
		if duration && r.state() == perfEnd {
			break
		}
		if ok, err := r.pollLat(ctx, duration, false, "poll CQ", scnt, scnt); !ok {
			return err // nil: a timed run's time is over
		}
		r.sample(1)
	}
	return nil
}

// runLatSend is run_iter_lat_send: the client sends first; each side
// waits for the other's message, reposts the receive, and answers. Sends
// are signaled every cqMod-th (every one, as the send queue holds one).
func (r *perfRun) runLatSend(ctx context.Context) error {
	o := &r.o
	w := r.latWR(0, true)
	duration := o.durationOn
	iters := o.iters
	sizePerQP := uint64(o.rxDepth)
	cqMod := uint64(o.cqMod)
	var scnt, rcnt uint64
	firstRx := true
	r.measured = 0
	for scnt < iters || rcnt < iters || (duration && r.state() != perfEnd) {
		if (rcnt < iters || duration) && !(scnt < 1 && o.client()) {
			c, err := r.pollTimed(ctx, r.recvCQ, duration)
			if err != nil {
				fmt.Fprintf(r.stderr, "poll CQ failed %d\n", -1)
				return err
			}
			if c != nil {
				if firstRx {
					firstRx = false
					if duration {
						r.clock.begin()
					}
				}
				if c.Status != wr.Success {
					return r.compError(c, "server", fmt.Sprintf(" rcnt=%d", rcnt))
				}
				rcnt++
				r.sample(1)
				if duration || rcnt+sizePerQP <= iters {
					id := c.ID
					if _, err := r.qps[id].PostRecv(r.rwrs[id : id+1]); err != nil {
						fmt.Fprintf(r.stderr, "Couldn't post recv: rcnt=%d\n", rcnt)
						return err
					}
				}
			}
		}
		if scnt < iters || (duration && r.state() != perfEnd) {
			if !duration {
				r.tposted[scnt] = r.now()
			}
			scnt++
			poll := false
			if scnt%cqMod == 0 || (!duration && scnt == iters) {
				poll = true
				w.Flags |= wr.Signaled
			}
			if duration && r.state() == perfEnd {
				break
			}
			if err := r.postLat("Couldn't post send: scnt=%d \n", scnt); err != nil {
				return err
			}
			if poll {
				if ok, err := r.pollLat(ctx, duration, !duration && scnt == iters, "poll on Send CQ", scnt, scnt); !ok {
					return err // nil: a timed run's time is over
				}
				w.Flags &^= wr.Signaled
			}
		}
	}
	return nil
}

// latWR sets up the one work request of a latency loop for o.size
// bytes, with flags, and inline where inline allows it and the size fits.
func (r *perfRun) latWR(flags wr.SendFlags, inline bool) *wr.SendWR {
	w := &r.wrs[0]
	w.SGList[0].Length = uint32(r.o.size)
	w.Flags = flags
	if inline && r.o.size <= uint64(r.o.inline) {
		w.Flags |= wr.Inline
	}
	return w
}

// sample counts n measured iterations when a timed run is sampling.
func (r *perfRun) sample(n uint64) {
	if r.o.durationOn && r.state() == perfSample {
		r.measured += n
	}
}

// postLat posts the first work request on the first QP, the one request
// of a latency loop; a failure is reported as perftest does, by format
// with the send count.
func (r *perfRun) postLat(format string, scnt uint64) error {
	if _, err := r.qps[0].PostSend(r.wrs[:1]); err != nil {
		fmt.Fprintf(r.stderr, format, scnt)
		return err
	}
	return nil
}

// pollLat waits for a latency loop's send completion (pollTimed). It
// reports false, with a nil error, when a timed run's time is over, and
// false with the error when the poll (named what in the report) fails or
// the completion has an error status (reported with the counts).
func (r *perfRun) pollLat(ctx context.Context, duration, last bool, what string, scnt, ccnt uint64) (bool, error) {
	var c *wr.Completion
	var err error
	if last && r.o.conn == perfRC && !r.o.events {
		if c, err = r.pollLast(ctx); err == nil && c == nil {
			return true, nil // the peer took the message and left
		}
	} else {
		c, err = r.pollTimed(ctx, r.sendCQ, duration)
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "%s failed %d\n", what, -1)
		return false, err
	}
	if c == nil {
		return false, nil
	}
	if c.Status != wr.Success {
		return false, r.compError(c, "client", fmt.Sprintf("scnt=%d, ccnt=%d", scnt, ccnt))
	}
	return true, nil
}

// perfPeerGoneGrace is how long pollLast still waits for the last
// completion once the peer has gone.
const perfPeerGoneGrace = 200 * time.Millisecond

// perfLastLate is how long pollLast waits for the last completion before
// it starts to look for the peer.
const perfLastLate = 100 * time.Millisecond

// pollLast waits for the completion of a latency loop's last send, and
// returns nil without one when the peer has gone meanwhile. The peer
// leaves only once it has seen that message, but the acknowledgement may
// never come: perftest destroys its QP as soon as it sees the message
// (see linger), and rxe retransmits to the QP that is gone forever. The
// message's completion is not part of the figures, which come from the
// posting times.
func (r *perfRun) pollLast(ctx context.Context) (*wr.Completion, error) {
	wc := r.wc[:1]
	var start, gone time.Time
	for spins := 1; ; spins++ {
		n, err := r.sendCQ.Poll(wc)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return &wc[0], nil
		}
		if spins%4096 != 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The peer is looked for only once the completion is late, so
		// that a run that has it does not pay for the look.
		if start.IsZero() {
			start = time.Now()
			continue
		}
		switch {
		case time.Since(start) < perfLastLate:
		case !gone.IsZero():
			if time.Since(gone) > perfPeerGoneGrace {
				return nil, nil
			}
		case r.peerGone():
			gone = time.Now()
		}
	}
}

// peerGone reports, without waiting, whether the peer has left: its
// exchange socket is at its end, or, with -R, one of the test's rdma_cm
// connections reported DISCONNECTED. Over the socket it allocates
// nothing; the socket stays open, netConn's, for the rest of the run.
func (r *perfRun) peerGone() bool {
	if r.netConn != nil {
		if r.netFD < 0 {
			return false
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(r.netFD), uintptr(unsafe.Pointer(&r.peekBuf[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			return n == 0 // the peer's end of the stream
		case unix.EAGAIN, unix.EINTR:
			return false
		}
		return true // reset, or the like
	}
	for _, id := range r.cmIDs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		gone := cmDisconnected(ctx, id)
		cancel()
		if gone {
			return true
		}
	}
	return false
}

// pollTimed waits for one completion on cq; in a timed run it gives up,
// returning nil, when the time is over. A latency loop must not wait
// beyond that for its last send's completion, which nothing measures: a
// timed write_lat (rdmago against rdmago, and perftest's server against
// rdmago) has been seen to spin forever on one, its peer finished. The
// peer had destroyed its QP before acknowledging the send, and rxe
// retransmits forever with a retry count of 7 (see linger).
func (r *perfRun) pollTimed(ctx context.Context, cq *uverbs.CQ, duration bool) (*wr.Completion, error) {
	if !duration {
		return r.pollOne(ctx, cq)
	}
	wc := r.wc[:1]
	for spins := 1; ; spins++ {
		if r.state() == perfEnd {
			return nil, nil
		}
		n, err := cq.Poll(wc)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return &wc[0], nil
		}
		if spins%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
}

// close is destroy_ctx: everything destroyed in perftest's order, each
// failure with its message.
func (r *perfRun) close() int {
	status := 0
	r.disconnectCM()
	for i, q := range r.qps {
		if r.ahs[i] != nil && r.ahs[i].Close() != nil {
			fmt.Fprintf(r.stderr, "Failed to destroy AH\n")
			status = 1
		}
		if err := q.Close(); err != nil {
			fmt.Fprintf(r.stderr, "Couldn't destroy QP - %s\n", clib.Strerror(err))
			status = 1
		}
	}
	if err := r.sendCQ.Close(); err != nil {
		fmt.Fprintf(r.stderr, "Failed to destroy CQ - %s\n", clib.Strerror(err))
		status = 1
	}
	if r.recvCQ != r.sendCQ {
		if err := r.recvCQ.Close(); err != nil {
			fmt.Fprintf(r.stderr, "Failed to destroy CQ - %s\n", clib.Strerror(err))
			status = 1
		}
	}
	if err := r.mr.Close(); err != nil {
		fmt.Fprintf(r.stderr, "Failed to deregister MR #%d\n", 1)
		status = 1
	}
	if err := r.pd.Close(); err != nil {
		fmt.Fprintf(r.stderr, "Failed to deallocate PD - %s\n", clib.Strerror(err))
		status = 1
	}
	if r.ch != nil {
		if err := r.ch.Close(); err != nil {
			fmt.Fprintf(r.stderr, "Failed to close event channel\n")
			status = 1
		}
	}
	r.releaseCM()
	if err := r.ownCtx().Close(); err != nil {
		fmt.Fprintf(r.stderr, "Failed to close device context\n")
		status = 1
	}
	return status
}

// ownCtx is the device context this run opened, to be closed by it.
func (r *perfRun) ownCtx() *uverbs.Context {
	if r.devCtx != nil {
		return r.devCtx
	}
	return r.uctx
}

// release frees whatever is left, on every path (Close is idempotent).
func (r *perfRun) release() {
	r.stopClock()
	for i, q := range r.qps {
		if r.ahs != nil {
			clib.CloseIf(r.ahs[i])
		}
		q.Close()
	}
	clib.CloseIf(r.sendCQ)
	clib.CloseIf(r.recvCQ)
	clib.CloseIf(r.mr)
	clib.CloseIf(r.pd)
	clib.CloseIf(r.ch)
	r.releaseCM()
	clib.CloseIf(r.ownCtx())
	clib.CloseIf(r.mem)
}
