package pingpong

// The run of "rdmago pingpong" over the verbs API: what main and
// pp_init_ctx, pp_connect_ctx and pp_close_ctx of the C programs do, in
// the same order, with the same messages.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tcpexch"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Work request IDs, as the C programs number them; the pending masks use
// them as bits.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// ppQKey is the Q_Key of ibv_ud_pingpong's queue pairs and sends.
const ppQKey = 0x11111111

// ppGRH is the room a UD receive leaves for the global route header.
const ppGRH = 40

// ppRun is one run: the options, the verbs objects, the counters.
type ppRun struct {
	o              ppOptions
	stdout, stderr io.Writer

	pageSize int
	mem      *mr.Memory
	buf      []byte // the registered buffer: size bytes, plus the GRH room for UD
	uctx     *uverbs.Context
	ch       *uverbs.CompChannel
	pd       *uverbs.PD
	mr       *uverbs.MR
	cq       *uverbs.CQ
	srq      *uverbs.SRQ
	qps      []*uverbs.QP
	ah       *uverbs.AH
	port     uverbs.PortAttr

	sendFlags wr.SendFlags
	recvs     []wr.RecvWR // rxDepth identical receive requests
	send      []wr.SendWR // the one send request
	wc        []wr.Completion
	pending   []int // per QP: the work requests awaited, as WR ID bits
	numEvents int
	ts        ppTSStats // -t: the receive completions' timestamps
}

// failf prints a C program's message on stderr; the run then ends with
// status 1.
func (r *ppRun) failf(format string, args ...any) int {
	fmt.Fprintf(r.stderr, format+"\n", args...)
	return 1
}

// main is the C programs' main from the device list on. It returns the
// exit status.
func (r *ppRun) main(ctx context.Context) int {
	o := &r.o
	r.pageSize = os.Getpagesize()

	devs, err := uverbs.Devices()
	if err != nil {
		return r.failf("Failed to get IB devices list: %s", clib.Strerror(err))
	}
	// libibverbs lists devices in the kernel's order, by index.
	devs = slices.Clone(devs)
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })
	var dev *uverbs.Device
	if !o.devSet {
		if len(devs) == 0 {
			return r.failf("No IB devices found")
		}
		dev = &devs[0]
	} else {
		for i := range devs {
			if devs[i].Name == o.devName {
				dev = &devs[i]
				break
			}
		}
		if dev == nil {
			return r.failf("IB device %s not found", o.devName)
		}
	}

	defer r.release()
	if status := r.init(*dev); status != 0 {
		return status
	}
	// Room for as many completions as the C programs poll at once: two,
	// or, for srq, all the CQ can hold (whose creation bounded the size).
	if o.kind == ppSRQ {
		r.wc = make([]wr.Completion, int(o.numQP)+int(o.rxDepth))
	} else {
		r.wc = make([]wr.Completion, 2)
	}

	routs := r.postRecv(int(o.rxDepth))
	if uint32(routs) < o.rxDepth {
		return r.failf("Couldn't post receive (%d)", routs)
	}
	if o.events {
		if err := r.cq.ReqNotify(false); err != nil {
			return r.failf("Couldn't request CQ notification")
		}
	}
	if r.port, err = r.uctx.QueryPort(uint8(o.ibPort)); err != nil {
		return r.failf("Couldn't get port info")
	}

	local, status := r.localDests()
	if status != 0 {
		return status
	}

	proto := ppProto{slots: 1, srq: o.kind == ppSRQ}
	if o.kind == ppSRQ {
		proto.slots = ppSRQSlots
	}
	var remote []ppDest
	if o.server != "" {
		remote, status = r.clientExchange(ctx, proto, local)
	} else {
		remote, status = r.serverExchange(ctx, proto, local)
	}
	if status != 0 {
		return status
	}
	for i := 0; i < len(r.qps) && i < len(remote); i++ {
		io.WriteString(r.stdout, ppAddressLine("remote", remote[i], false))
	}

	if o.server != "" {
		if err := r.connect(local, remote); err != nil {
			fmt.Fprintln(r.stderr, err)
			return 1
		}
	}

	// The first sends, from the client.
	r.pending = make([]int, len(r.qps))
	for i := range r.pending {
		r.pending[i] = ppRecvWRID
	}
	if o.server != "" {
		if o.chk {
			for i := 0; i < int(o.size); i += r.pageSize {
				r.payload()[i] = 0 // i / page_size % sizeof(char), in C
			}
		}
		for i := range r.qps {
			if r.postSend(i) != nil {
				return r.failf("Couldn't post send")
			}
			r.pending[i] |= ppSendWRID
		}
	}

	start := time.Now()
	if status := r.loop(ctx, routs); status != 0 {
		return status
	}
	usec := time.Since(start).Microseconds()

	io.WriteString(r.stdout, ppReport(o.size, o.iters, usec))
	if o.ts {
		io.WriteString(r.stdout, r.ts.report())
	}
	if o.server == "" && o.chk {
		for i := 0; i < int(o.size); i += r.pageSize {
			if r.payload()[i] != 0 {
				fmt.Fprintf(r.stdout, "invalid data in page %d\n", i/r.pageSize)
			}
		}
	}

	if r.numEvents > 0 {
		r.cq.AckEvents(r.numEvents)
	}
	return r.close()
}

// payload is the part of the buffer sent and checked: all of it, but for
// the GRH room of UD.
func (r *ppRun) payload() []byte {
	if r.o.kind == ppUD {
		return r.buf[ppGRH:]
	}
	return r.buf
}

// init is pp_init_ctx: the buffer, the context and every verbs object,
// with the queue pairs in INIT.
func (r *ppRun) init(dev uverbs.Device) int {
	o := &r.o
	n := int(o.size)
	if o.kind == ppUD {
		n += ppGRH
	}
	var err error
	// At least one byte: a zero-size buffer is the registration's to refuse.
	if r.mem, err = mr.Alloc(max(n, 1)); err != nil {
		return r.failf("Couldn't allocate work buf.")
	}
	r.buf = r.mem.Bytes()[:n]
	fill := byte(0x7b) // the C programs' memset, "FIXME" and all
	if o.kind == ppSRQ {
		fill = 0
	}
	for i := range r.buf {
		r.buf[i] = fill
	}

	if r.uctx, err = dev.Open(); err != nil {
		return r.failf("Couldn't get context for %s", dev.Name)
	}

	if o.kind == ppUD {
		pa, err := r.uctx.QueryPort(uint8(o.ibPort))
		if err != nil {
			return r.failf("Unable to query port info for port %d", o.ibPort)
		}
		if mtu := 1 << (int(pa.ActiveMTU) + 7); int(o.size) > mtu {
			return r.failf("Requested size larger than port MTU (%d)", mtu)
		}
	}
	if o.kind == ppSRQ && o.odp {
		if status := r.checkODP(); status != 0 {
			return status
		}
	}

	if o.events {
		if r.ch, err = r.uctx.NewCompChannel(); err != nil {
			return r.failf("Couldn't create completion channel")
		}
	}
	if r.pd, err = r.uctx.AllocPD(); err != nil {
		return r.failf("Couldn't allocate PD")
	}

	access := wr.LocalWrite
	if o.kind == ppRC && (o.odp || o.ts || o.dm) {
		if status := r.checkRCFeatures(); status != 0 {
			return status
		}
	}
	if o.odp {
		access |= wr.OnDemand
	}
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return r.failf("Couldn't register MR")
	}
	if o.prefetch {
		// ibv_advise_mr has no rdmago counterpart; the C program goes on
		// when it fails, and so do we.
		fmt.Fprintf(r.stderr, "Couldn't prefetch MR(%d). Continue anyway\n", int(unix.EOPNOTSUPP))
	}

	cqe := int(int32(o.rxDepth + 1))
	if o.kind == ppSRQ {
		cqe = int(int32(o.rxDepth + o.numQP))
	}
	if r.cq, err = r.uctx.CreateCQ(uverbs.CQAttr{CQE: cqe, Channel: r.ch, Timestamps: o.ts}); err != nil {
		return r.failf("Couldn't create CQ")
	}

	nqp := 1
	caps := qp.Caps{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	typ := qp.RC
	switch o.kind {
	case ppUC:
		typ = qp.UC
	case ppUD:
		typ = qp.UD
	case ppSRQ:
		if r.srq, err = r.pd.CreateSRQ(uverbs.SRQAttr{MaxWR: o.rxDepth, MaxSGE: 1}); err != nil {
			return r.failf("Couldn't create SRQ")
		}
		nqp = int(o.numQP)
		caps = qp.Caps{MaxSendWR: 1, MaxSendSGE: 1}
	}
	r.sendFlags = wr.Signaled
	for i := 0; i < nqp; i++ {
		q, err := r.pd.CreateQP(uverbs.QPInitAttr{Type: typ, SendCQ: r.cq, RecvCQ: r.cq, SRQ: r.srq, Caps: caps})
		if err != nil {
			if o.kind == ppSRQ {
				return r.failf("Couldn't create QP[%d]", i)
			}
			return r.failf("Couldn't create QP")
		}
		r.qps = append(r.qps, q)
		// As the C programs: ask the QP what it can inline (they ignore a
		// failed query and keep the capabilities they asked for).
		inline := caps.MaxInlineData
		if _, ia, err := q.Query(qp.AttrCap); err == nil {
			inline = ia.Caps.MaxInlineData
		}
		if inline >= o.size && !o.dm {
			r.sendFlags |= wr.Inline
		}
	}
	for i, q := range r.qps {
		a, m := qp.ToInit(typ, uint8(o.ibPort), 0, 0, ppQKey)
		if err := q.Modify(a, m); err != nil {
			if o.kind == ppSRQ {
				return r.failf("Failed to modify QP[%d] to INIT", i)
			}
			return r.failf("Failed to modify QP to INIT")
		}
	}

	// The work requests, built once: posting them allocates nothing.
	recvLen := o.size
	if o.kind == ppUD {
		recvLen += ppGRH
	}
	recvSGE := []wr.SGE{r.mr.SGE(0, int(recvLen))}
	r.recvs = make([]wr.RecvWR, o.rxDepth)
	for i := range r.recvs {
		r.recvs[i] = wr.RecvWR{ID: ppRecvWRID, SGList: recvSGE}
	}
	sendOff := 0
	if o.kind == ppUD {
		sendOff = ppGRH
	}
	r.send = []wr.SendWR{{ID: ppSendWRID, Opcode: wr.OpSend, Flags: r.sendFlags,
		SGList: []wr.SGE{r.mr.SGE(sendOff, int(o.size))}}}
	return 0
}

// checkRCFeatures is ibv_rc_pingpong's check of what -o, -O, -t and -j
// need, with its messages; where the device has what they need, rdmago
// says which of them it does not implement (-O and -j).
func (r *ppRun) checkRCFeatures() int {
	o := &r.o
	attr, err := r.uctx.QueryDevice()
	if err != nil {
		return r.failf("Couldn't query device for its features")
	}
	if o.odp {
		const need = odpSupportSend | odpSupportRecv
		if attr.ODPCaps.GeneralCaps&odpSupport == 0 || attr.ODPCaps.RCODPCaps&need != need {
			return r.failf("The device isn't ODP capable or does not support RC send and receive with ODP")
		}
		if o.iodp && attr.ODPCaps.GeneralCaps&odpSupportImplicit == 0 {
			return r.failf("The device doesn't support implicit ODP")
		}
		if o.iodp {
			return r.failf("rdmago: implicit on-demand paging (-O) is not implemented")
		}
	}
	if o.ts {
		if attr.CompletionTimestampMask == 0 {
			return r.failf("The device isn't completion timestamp capable")
		}
		r.ts = newPPTSStats(attr.CompletionTimestampMask)
	}
	if o.dm {
		if attr.MaxDMSize == 0 {
			return r.failf("Device doesn't support dm allocation")
		}
		if attr.MaxDMSize < uint64(o.size) {
			return r.failf("Device memory is insufficient")
		}
		return r.failf("rdmago: device memory (-j) is not implemented")
	}
	return 0
}

// checkODP is ibv_srq_pingpong's check for -o.
func (r *ppRun) checkODP() int {
	attr, err := r.uctx.QueryDevice()
	if err != nil {
		return r.failf("Couldn't query device for its features")
	}
	const need = odpSupportSend | odpSupportSRQRecv
	if attr.ODPCaps.GeneralCaps&odpSupport == 0 || attr.ODPCaps.RCODPCaps&need != need {
		return r.failf("The device isn't ODP capable or does not support RC send, receive and srq with ODP")
	}
	return 0
}

// On-demand paging capability bits (enum ibv_odp_general_caps and enum
// ibv_odp_transport_cap_bits).
const (
	odpSupport         = 1 << 0
	odpSupportImplicit = 1 << 1
	odpSupportSend     = 1 << 0
	odpSupportRecv     = 1 << 1
	odpSupportSRQRecv  = 1 << 5
)

// localDests makes and prints the local addresses: the QP numbers, random
// PSNs, the port's LID and the GID of -g.
func (r *ppRun) localDests() ([]ppDest, int) {
	o := &r.o
	if o.kind != ppUD && r.port.LinkLayer != uverbs.LinkLayerEthernet && r.port.LID == 0 {
		return nil, r.failf("Couldn't get local LID")
	}
	if o.gidIdx < 0 && r.port.LinkLayer == uverbs.LinkLayerEthernet {
		// Without -g the C programs use no GRH, which RoCE cannot carry:
		// they fail to connect. Pick the GID rdma_cm would instead.
		if e, err := r.uctx.SelectGID(uint8(o.ibPort), netip.Addr{}); err == nil {
			o.gidIdx = int32(e.Index)
		}
	}
	var gid [16]byte
	if o.gidIdx >= 0 {
		var err error
		if gid, err = r.queryGID(uint32(o.gidIdx)); err != nil {
			if o.kind == ppRC || o.kind == ppUC {
				return nil, r.failf("can't read sgid of index %d", o.gidIdx)
			}
			return nil, r.failf("Could not get local gid for gid index %d", o.gidIdx)
		}
	}
	local := make([]ppDest, len(r.qps))
	for i, q := range r.qps {
		local[i] = ppDest{LID: uint32(r.port.LID), QPN: q.Num(), PSN: rand.Uint32() & 0xffffff, GID: gid}
		io.WriteString(r.stdout, ppAddressLine("local", local[i], o.kind == ppUD))
	}
	return local, 0
}

// queryGID is ibv_query_gid: the GID at index of the port's table, all
// zeros for an empty entry, an error past the table's end.
//
// uverbs has no single-entry query (UVERBS_METHOD_QUERY_GID_ENTRY); the
// whole table serves.
func (r *ppRun) queryGID(index uint32) ([16]byte, error) {
	if index >= uint32(r.port.GIDTblLen) {
		return [16]byte{}, unix.EINVAL
	}
	gids, err := r.uctx.QueryGIDTable()
	if err != nil {
		return [16]byte{}, err
	}
	for _, g := range gids {
		if g.Port == uint8(r.o.ibPort) && uint32(g.Index) == index {
			return g.GID, nil
		}
	}
	return [16]byte{}, nil
}

// clientExchange connects to the server and swaps addresses.
func (r *ppRun) clientExchange(ctx context.Context, p ppProto, local []ppDest) ([]ppDest, int) {
	host, port := r.o.server, int(r.o.port)
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, r.failf("%s for %s:%d", clib.GaiStrerror(err), host, port)
	}
	conn := tcpexch.Dial(ctx, "tcp", addrs, port)
	if conn == nil {
		return nil, r.failf("Couldn't connect to %s:%d", host, port)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	remote, err := p.client(conn, local)
	if err != nil {
		return nil, r.failf("%v", err)
	}
	return remote, 0
}

// serverExchange waits for one client, moves the QPs to RTS towards it
// and answers with the local addresses.
func (r *ppRun) serverExchange(ctx context.Context, p ppProto, local []ppDest) ([]ppDest, int) {
	port := int(r.o.port)
	ln, err := tcpexch.Listen(ctx, "tcp", port)
	if err != nil {
		return nil, r.failf("Couldn't listen to port %d", port)
	}
	conn, err := tcpexch.AcceptOne(ctx, ln)
	if err != nil {
		return nil, r.failf("accept() failed")
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	remote, err := p.server(conn, local, func(remote []ppDest) error { return r.connect(local, remote) })
	if err != nil {
		return nil, r.failf("%v", err)
	}
	return remote, 0
}

// connect is pp_connect_ctx: each QP to RTR and RTS towards the remote
// addresses (and, for UD, the address handle to reach them). The error
// text is the C program's message.
func (r *ppRun) connect(local, remote []ppDest) error {
	o := &r.o
	if len(remote) < len(r.qps) {
		return fmt.Errorf("got %d remote addresses for %d QPs", len(remote), len(r.qps))
	}
	for i, q := range r.qps {
		rem := qp.Endpoint{
			QPN: remote[i].QPN,
			PSN: remote[i].PSN,
			LID: uint16(remote[i].LID),
			GID: remote[i].GID,
		}
		path := qp.Path{SGIDIndex: uint8(o.gidIdx), PortNum: uint8(o.ibPort), SL: uint8(o.sl)}
		if o.kind == ppSRQ {
			// ibv_srq_pingpong routes every QP by the first remote GID.
			rem.GID = remote[0].GID
		}
		suffix := ""
		if o.kind == ppSRQ {
			suffix = fmt.Sprintf("[%d]", i)
		}
		a, m := qp.ToRTR(q.Type(), rem, path, qp.MTU(o.mtu))
		if err := q.Modify(a, m); err != nil {
			return ppMsg("Failed to modify QP" + suffix + " to RTR")
		}
		a, m = qp.ToRTS(q.Type(), local[i].PSN)
		if err := q.Modify(a, m); err != nil {
			return ppMsg("Failed to modify QP" + suffix + " to RTS")
		}
		if o.kind == ppUD {
			ah, err := r.pd.CreateAH(path.AH(rem))
			if err != nil {
				return ppMsg("Failed to create AH")
			}
			r.ah = ah
			r.send[0].AH = ah
			r.send[0].RemoteQPN = remote[i].QPN
			r.send[0].RemoteQKey = ppQKey
		}
	}
	return nil
}

// postRecv posts up to n receives, to the QP or the SRQ, and returns how
// many it posted.
func (r *ppRun) postRecv(n int) int {
	if n <= 0 {
		return 0
	}
	n = min(n, len(r.recvs))
	var k int
	if r.srq != nil {
		k, _ = r.srq.PostRecv(r.recvs[:n])
	} else {
		k, _ = r.qps[0].PostRecv(r.recvs[:n])
	}
	return k
}

func (r *ppRun) postSend(i int) error {
	_, err := r.qps[i].PostSend(r.send)
	return err
}

// loop is the C programs' main loop: wait for completions (busy polling,
// or sleeping on the completion channel with -e), count them, keep the
// receive queue full and answer each completed exchange with the next send.
func (r *ppRun) loop(ctx context.Context, routs int) int {
	o := &r.o
	var rcnt, scnt uint32
	refillAt := 1
	if o.kind == ppSRQ {
		refillAt = int(o.numQP)
	}
	for rcnt < o.iters || scnt < o.iters {
		if o.events {
			cq, err := r.ch.GetEvent(ctx)
			if err != nil {
				return r.failf("Failed to get cq_event")
			}
			r.numEvents++
			if cq != r.cq {
				return r.failf("CQ event for unknown CQ %p", cq)
			}
			if err := r.cq.ReqNotify(false); err != nil {
				return r.failf("Couldn't request CQ notification")
			}
		}
		ne := 0
		for spins := 1; ; spins++ {
			var err error
			if ne, err = r.cq.Poll(r.wc); err != nil {
				return r.failf("poll CQ failed %d", -1)
			}
			if o.events || ne >= 1 {
				break
			}
			if spins%4096 == 0 && ctx.Err() != nil {
				return r.failf("poll CQ failed: %v", ctx.Err())
			}
		}
		for i := 0; i < ne; i++ {
			if status := r.complete(&r.wc[i], &rcnt, &scnt, &routs, refillAt); status != 0 {
				// With -t, ibv_rc_pingpong returns parse_single_wc's
				// status without a word of its own.
				if o.kind == ppRC && !o.ts {
					fmt.Fprintf(r.stderr, "parse WC failed %d\n", ne)
				}
				return status
			}
		}
	}
	return 0
}

// complete handles one completion, as parse_single_wc and its copies do.
func (r *ppRun) complete(c *wr.Completion, rcnt, scnt *uint32, routs *int, refillAt int) int {
	o := &r.o
	if c.Status != wr.Success {
		return r.failf("Failed status %s (%d) for wr_id %d", c.Status, int(c.Status), int32(c.ID))
	}
	qi := 0
	if o.kind == ppSRQ {
		qi = -1
		for i, q := range r.qps {
			if q.Num() == c.QPNum {
				qi = i
				break
			}
		}
		if qi < 0 {
			return r.failf("Couldn't find QPN %06x", c.QPNum)
		}
	}
	switch int32(c.ID) {
	case ppSendWRID:
		*scnt++
	case ppRecvWRID:
		if *routs--; *routs <= refillAt {
			*routs += r.postRecv(int(o.rxDepth) - *routs)
			if uint32(*routs) < o.rxDepth {
				return r.failf("Couldn't post receive (%d)", *routs)
			}
		}
		*rcnt++
		if o.ts {
			r.ts.add(c.Timestamp)
		}
	default:
		return r.failf("Completion for unknown wr_id %d", int32(c.ID))
	}
	r.pending[qi] &^= int(int32(c.ID))
	if *scnt < o.iters && r.pending[qi] == 0 {
		if r.postSend(qi) != nil {
			return r.failf("Couldn't post send")
		}
		r.pending[qi] = ppRecvWRID | ppSendWRID
	}
	return 0
}

// close is pp_close_ctx: everything destroyed in the C programs' order,
// each failure with its message.
func (r *ppRun) close() int {
	for i, q := range r.qps {
		if q.Close() != nil {
			if r.o.kind == ppSRQ {
				return r.failf("Couldn't destroy QP[%d]", i)
			}
			return r.failf("Couldn't destroy QP")
		}
	}
	if r.srq != nil && r.srq.Close() != nil {
		return r.failf("Couldn't destroy SRQ")
	}
	if r.cq.Close() != nil {
		return r.failf("Couldn't destroy CQ")
	}
	if r.mr.Close() != nil {
		return r.failf("Couldn't deregister MR")
	}
	if r.ah != nil && r.ah.Close() != nil {
		return r.failf("Couldn't destroy AH")
	}
	if r.pd.Close() != nil {
		return r.failf("Couldn't deallocate PD")
	}
	if r.ch != nil && r.ch.Close() != nil {
		return r.failf("Couldn't destroy completion channel")
	}
	if r.uctx.Close() != nil {
		return r.failf("Couldn't release context")
	}
	return 0
}

// release frees whatever is left, on every path: after close it finds
// everything closed already (Close is idempotent); after a failure it
// cleans up what the C programs leave to the process's exit.
func (r *ppRun) release() {
	for _, q := range r.qps {
		q.Close()
	}
	clib.CloseIf(r.srq)
	clib.CloseIf(r.cq)
	clib.CloseIf(r.mr)
	clib.CloseIf(r.ah)
	clib.CloseIf(r.pd)
	clib.CloseIf(r.ch)
	clib.CloseIf(r.uctx)
	clib.CloseIf(r.mem)
}
