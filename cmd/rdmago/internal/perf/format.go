package perf

// What "rdmago perf" prints: perftest's header (ctx_print_test_info), the
// address lines (ctx_print_pingpong_data), the result tables
// (print_full_bw_report, print_report_lat, print_report_lat_duration)
// with perftest's arithmetic, and the JSON report of --json. Nothing here
// touches a device.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/uverbs"
)

// perfCG formats x as printf("%g") does.
func perfCG(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return clib.FormatFloat(x, 0)
	}
	if x == 0 {
		return "0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(x))))
	// Rounding to 6 significant digits may carry into the next power.
	if r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'e', 5, 64), 64); math.Abs(r) >= math.Pow(10, float64(exp+1)) {
		exp++
	}
	if exp < -4 || exp >= 6 {
		s := strconv.FormatFloat(x, 'e', 5, 64)
		mant, e, _ := strings.Cut(s, "e")
		if strings.Contains(mant, ".") {
			mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
		}
		return mant + "e" + e
	}
	s := strconv.FormatFloat(x, 'f', max(0, 5-exp), 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// perfLeft pads s with spaces on the right to width w (C's "%-<w>s").
func perfLeft(s string, w int) string {
	if len(s) >= w {
		return s
	}
	return s + strings.Repeat(" ", w-len(s))
}

// perfAltHex formats v as C's "%#0<w>x": "0x" and zero-padding to width
// w in all, but no "0x" for zero, which is all zeros.
func perfAltHex(v uint64, w int) string {
	if v == 0 {
		return strings.Repeat("0", max(w, 1))
	}
	h := strconv.FormatUint(v, 16)
	if pad := w - 2 - len(h); pad > 0 {
		h = strings.Repeat("0", pad) + h
	}
	return "0x" + h
}

// perfWaitingBanner is what a server prints before it accepts.
const perfWaitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// perfTransportStr is perftest's transport_str.
func perfTransportStr(t uverbs.Transport) string {
	switch t {
	case uverbs.TransportIB:
		return "IB"
	case uverbs.TransportIWARP:
		return "IW"
	}
	return "Unknown"
}

// perfTestInfo is the header block (ctx_print_test_info).
func perfTestInfo(o *perfOptions) string {
	t := o.test
	var b strings.Builder
	b.WriteString(perfResultLine)
	b.WriteString("                    ")
	b.WriteString(perfTestsStr[t.verb] + " ")
	if t.verb == perfAtomic {
		b.WriteString(perfAtomicTypes[o.atomicType] + " ")
	}
	if t.tst == perfBW {
		if o.postList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if o.events {
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", o.devName, o.eqNum)
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", o.devName)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", o.numQPs, o.transport)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", o.conn, "OFF")
	// rdmago asks for no PCIe relaxed ordering: the line perftest prints
	// when built without it.
	fmt.Fprintf(&b, " PCIe relax order: %s\n", "Unsupported")
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", "OFF")
	if o.client() {
		fmt.Fprintf(&b, " TX depth        : %d\n", o.txDepth)
	}
	if o.postList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", o.postList)
	}
	if t.verb == perfSend && !o.client() {
		fmt.Fprintf(&b, " RX depth        : %d\n", o.rxDepth)
	}
	if t.tst == perfBW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", o.cqMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", 1<<(7+o.curMTU))
	fmt.Fprintf(&b, " Link type       : %s\n", o.linkType)
	if o.gidIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", o.gidIndex)
	}
	if t.verb != perfRead && t.verb != perfAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", o.inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", o.outReads)
	}
	if !o.rdmaCM {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
		b.WriteString(" Data ex. method : Ethernet\n")
	} else {
		b.WriteString(" rdma_cm QPs\t : ON\n")
		b.WriteString(" Data ex. method : rdma_cm\n")
		if !o.client() {
			b.WriteString(perfResultLine)
			b.WriteString(" Waiting for client rdma_cm QP to connect\n")
			b.WriteString(" Please run the same command with the IB/RoCE interface IP\n")
		}
	}
	b.WriteString(perfResultLine)
	return b.String()
}

// perfAddrLines are the lines of one queue pair's address
// (ctx_print_pingpong_data): side is "local" or "remote".
func perfAddrLines(side string, d perfDest, o *perfOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side,
		perfAltHex(uint64(uint16(d.LID)), 4), perfAltHex(uint64(d.QPN), 6), perfAltHex(uint64(d.PSN), 6))
	// perftest prints by the verb of its exchange's parameters, which
	// with rdma_cm are those of its SEND connection: no keys then.
	verb := o.test.verb
	if o.rdmaCM {
		verb = perfSend
	}
	switch verb {
	case perfRead:
		fmt.Fprintf(&b, " OUT %s", perfAltHex(uint64(d.OutReads), 4))
		fallthrough
	case perfWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", perfAltHex(uint64(d.RKey), 8), perfAltHex(d.VAddr, 16))
	}
	b.WriteString("\n")
	if o.gidIndex > -1 {
		b.WriteString(" GID: ")
		for i, c := range d.GID {
			if i > 0 {
				b.WriteString(":")
			}
			fmt.Fprintf(&b, "%02d", c)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The table headings.
const (
	perfFmtBW     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	perfFmtBWG    = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	perfFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	perfFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
)

// perfTableHeader is the line and heading above the results.
func perfTableHeader(o *perfOptions) string {
	switch {
	case o.test.tst == perfBW && o.reportG:
		return perfResultLine + perfFmtBWG + "\n"
	case o.test.tst == perfBW:
		return perfResultLine + perfFmtBW + "\n"
	case o.durationOn:
		return perfResultLine + perfFmtLatDur + "\n"
	}
	return perfResultLine + perfFmtLat + "\n"
}

// perfBWInput is what print_report_bw computes a bandwidth report from.
// Times are in nanoseconds, unsigned like perftest's cycles_t.
type perfBWInput struct {
	size     uint64
	iters    uint64 // per QP; with -D, the completions counted while sampling
	numQPs   int
	postList int
	cqMod    int
	noPeak   bool
	duration bool
	gbits    bool
	// tposted and tcompleted hold a stamp per message (iters × QPs)
	// unless noPeak, when they hold the start and end in [0].
	tposted, tcompleted []uint64
}

// perfTicksPerSec is the unit of the time stamps: nanoseconds (perftest
// counts CPU cycles and converts with the CPU's frequency).
const perfTicksPerSec = 1e9

// perfComputeBW is print_report_bw's arithmetic.
func perfComputeBW(in perfBWInput) perfBWReport {
	n := in.iters * uint64(in.numQPs)
	optDelta := in.tcompleted[0] - in.tposted[0]
	if !in.noPeak {
		cq := uint64(in.cqMod)
		for i := uint64(0); i < n; i += uint64(in.postList) {
			for j := perfRoundUp(i+1, cq) - 1; j < n; j += cq {
				if t := (in.tcompleted[j] - in.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			if n%cq != 0 {
				j := n - 1
				if t := (in.tcompleted[j] - in.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	format := uint64(0x100000)
	if in.gbits {
		format = 125000000
	}
	iters := in.iters
	if !in.duration {
		iters *= uint64(in.numQPs)
	}
	loc := uint64(0)
	if !in.noPeak {
		loc = iters - 1
	}
	sum := float64(in.tcompleted[loc] - in.tposted[0])
	var peakUp uint64
	if !in.noPeak {
		peakUp = in.size * uint64(perfTicksPerSec)
	}
	peakDown := optDelta * format
	return perfBWReport{
		Size:    in.size,
		Iters:   iters,
		BWPeak:  float64(peakUp) / float64(peakDown),
		BWAvg:   float64(in.size) * float64(iters) * perfTicksPerSec / (sum * float64(format)),
		MsgRate: float64(iters) * perfTicksPerSec / (sum * 1000000),
	}
}

// perfRoundUp is perftest's ROUND_UP.
func perfRoundUp(v, a uint64) uint64 {
	if v%a == 0 {
		return v
	}
	return a * (v/a + 1)
}

// perfBWRow is the line print_full_bw_report prints for r (or, with
// --output, the one number asked for).
func perfBWRow(o *perfOptions, r perfBWReport) string {
	switch o.output {
	case perfOutBW:
		return clib.FormatFloat(r.BWAvg, 6) + "\n"
	case perfOutMsgRate:
		return clib.FormatFloat(r.MsgRate, 6) + "\n"
	}
	size := strconv.FormatUint(r.Size, 10)
	iters := strconv.FormatUint(r.Iters, 10)
	if r.BWAvg < 0.1 && o.reportG {
		// REPORT_FMT_EXT: more digits for small Gb/s figures.
		return " " + perfLeft(size, 7) + "    " + iters + "           " +
			perfLeft(clib.FormatFloat(r.BWPeak, 6), 7) + "            " +
			perfLeft(clib.FormatFloat(r.BWAvg, 6), 7) + "            " +
			perfLeft(clib.FormatFloat(r.MsgRate, 6), 7) + "\n"
	}
	return " " + perfLeft(size, 7) + "    " + perfLeft(iters, 10) + "       " +
		perfLeft(clib.FormatFloat(r.BWPeak, 2), 7) + "            " +
		perfLeft(clib.FormatFloat(r.BWAvg, 2), 7) + "\t\t   " +
		perfLeft(clib.FormatFloat(r.MsgRate, 6), 7) + "\n"
}

// perfLatReport is a latency result (print_report_lat), in microseconds.
type perfLatReport struct {
	Size     uint64
	Iters    uint64
	TMin     float64
	TMax     float64
	TTypical float64
	TAvg     float64
	TStdev   float64
	P99      float64
	P999     float64
	// Unsorted and Sorted are the samples -U and -H print.
	Unsorted, Sorted []float64
}

// perfComputeLat is print_report_lat's arithmetic over the post times of
// iters iterations (in nanoseconds). rttFactor is 2 when each sample is a
// round trip (send, write), 1 otherwise (read, atomic).
func perfComputeLat(size uint64, tposted []uint64, rttFactor int) perfLatReport {
	iters := len(tposted)
	measure := iters - 1
	delta := make([]uint64, measure)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	q := float64(perfTicksPerSec/1e6) * float64(rttFactor)
	r := perfLatReport{Size: size, Iters: uint64(iters)}
	r.Unsorted = make([]float64, measure)
	for i, d := range delta {
		r.Unsorted[i] = float64(d) / q
	}
	slices.Sort(delta)
	measure -= 2 // LAT_MEASURE_TAIL
	var median uint64
	if (measure-1)%2 != 0 {
		median = (delta[measure/2] + delta[measure/2-1]) / 2
	} else {
		median = delta[measure/2]
	}
	var sum float64
	for i := 0; i < measure; i++ {
		sum += float64(delta[i]) / q
	}
	avg := sum / float64(measure)
	var stdevSum float64
	for i := 0; i < measure; i++ {
		// perftest truncates each deviation to whole microseconds (an
		// int) before squaring it, and so does rdmago; it also squares
		// into an int, which overflows past 46 ms and ends in "-nan":
		// rdmago squares in floating point.
		v := math.Trunc(avg - float64(delta[i])/q)
		stdevSum += v * v
	}
	r.Sorted = make([]float64, measure)
	for i := range r.Sorted {
		r.Sorted[i] = float64(delta[i]) / q
	}
	i99 := int(math.Ceil(float64(measure) * 0.99))
	i999 := int(math.Ceil(float64(measure) * 0.999))
	r.TMin = float64(delta[0]) / q
	r.TMax = float64(delta[measure]) / q
	r.TTypical = float64(median) / q
	r.TAvg = avg
	r.TStdev = math.Sqrt(stdevSum / float64(measure))
	r.P99 = float64(delta[i99]) / q
	r.P999 = float64(delta[i999]) / q
	return r
}

// perfLatRows is what print_report_lat prints for r.
func perfLatRows(o *perfOptions, r perfLatReport) string {
	var b strings.Builder
	if o.unsorted {
		b.WriteString("#, usec\n")
		for i, v := range r.Unsorted {
			fmt.Fprintf(&b, "%d, %s\n", i+1, perfCG(v))
		}
	}
	if o.histogram {
		b.WriteString("#, usec\n")
		for i, v := range r.Sorted {
			fmt.Fprintf(&b, "%d, %s\n", i+1, perfCG(v))
		}
	}
	if (o.unsorted || o.histogram) && o.output == perfOutFull {
		b.WriteString(perfTableHeader(o))
	}
	if o.output == perfOutLat {
		b.WriteString(clib.FormatFloat(r.TAvg, 6) + "\n")
		return b.String()
	}
	f := func(v float64) string { return perfLeft(clib.FormatFloat(v, 2), 7) }
	fmt.Fprintf(&b, " %s %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n",
		perfLeft(strconv.FormatUint(r.Size, 10), 7), r.Iters,
		f(r.TMin), f(r.TMax), f(r.TTypical), f(r.TAvg), f(r.TStdev), f(r.P99), f(r.P999))
	return b.String()
}

// perfLatDurReport is a latency result of a timed run
// (print_report_lat_duration).
type perfLatDurReport struct {
	Size  uint64
	Iters uint64
	TAvg  float64 // microseconds
	TPS   float64
}

// perfComputeLatDur is print_report_lat_duration's arithmetic: iters
// iterations in sampleNs nanoseconds.
func perfComputeLatDur(size, iters, sampleNs uint64, rttFactor int) perfLatDurReport {
	perUsec := float64(perfTicksPerSec / 1e6)
	return perfLatDurReport{
		Size:  size,
		Iters: iters,
		TAvg:  ((float64(sampleNs) / perUsec) / float64(rttFactor)) / float64(iters),
		TPS:   float64(iters) / (float64(sampleNs) / (perUsec * 1000000)),
	}
}

// perfLatDurRow is what print_report_lat_duration prints for r.
func perfLatDurRow(o *perfOptions, r perfLatDurReport) string {
	if o.output == perfOutLat {
		return clib.FormatFloat(r.TAvg, 6) + "\n"
	}
	return fmt.Sprintf(" %s       %d            %s        %s\n",
		perfLeft(strconv.FormatUint(r.Size, 10), 7), r.Iters,
		perfLeft(clib.FormatFloat(r.TAvg, 2), 7), perfLeft(clib.FormatFloat(r.TPS, 2), 7))
}

// perfJSONFloat is a figure in the JSON report: a number, or null for
// what perftest would print as nan or inf.
type perfJSONFloat float64

func (f perfJSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// perfJSONDest is an address in the JSON report.
type perfJSONDest struct {
	LID      uint32 `json:"lid"`
	QPN      uint32 `json:"qpn"`
	PSN      uint32 `json:"psn"`
	OutReads uint32 `json:"out_reads,omitempty"`
	RKey     uint32 `json:"rkey,omitempty"`
	VAddr    uint64 `json:"vaddr,omitempty"`
	GID      string `json:"gid,omitempty"`
}

// perfJSONResult is one row of results. Which figures it has depends on
// the test: bandwidth, latency, or latency of a timed run.
type perfJSONResult struct {
	Bytes      uint64 `json:"bytes"`
	Iterations uint64 `json:"iterations"`
	// MeasuredBy is "local", or "remote" for the figures a bandwidth
	// server prints on the client's behalf.
	MeasuredBy string `json:"measured_by"`

	BWPeak  *perfJSONFloat `json:"bw_peak,omitempty"`
	BWAvg   *perfJSONFloat `json:"bw_average,omitempty"`
	MsgRate *perfJSONFloat `json:"msg_rate_mpps,omitempty"`

	TMin     *perfJSONFloat `json:"t_min_usec,omitempty"`
	TMax     *perfJSONFloat `json:"t_max_usec,omitempty"`
	TTypical *perfJSONFloat `json:"t_typical_usec,omitempty"`
	TAvg     *perfJSONFloat `json:"t_avg_usec,omitempty"`
	TStdev   *perfJSONFloat `json:"t_stdev_usec,omitempty"`
	P99      *perfJSONFloat `json:"p99_usec,omitempty"`
	P999     *perfJSONFloat `json:"p99_9_usec,omitempty"`
	TPS      *perfJSONFloat `json:"tps_average,omitempty"`
}

// perfJSONReport is what --json prints: the header's facts, the
// addresses and the results.
type perfJSONReport struct {
	Test         string           `json:"test"`
	Role         string           `json:"role"`
	Device       string           `json:"device"`
	IBPort       int              `json:"ib_port"`
	Connection   string           `json:"connection"`
	QPs          int              `json:"qps"`
	Transport    string           `json:"transport"`
	LinkType     string           `json:"link_type"`
	MTU          int              `json:"mtu"`
	GIDIndex     *int             `json:"gid_index,omitempty"`
	AtomicType   string           `json:"atomic_type,omitempty"`
	TXDepth      int              `json:"tx_depth,omitempty"`
	RXDepth      int              `json:"rx_depth,omitempty"`
	CQModeration int              `json:"cq_moderation,omitempty"`
	PostList     int              `json:"post_list"`
	InlineSize   *int             `json:"max_inline_data,omitempty"`
	OutReads     *int             `json:"outstanding_reads,omitempty"`
	Events       bool             `json:"events"`
	DurationSec  int              `json:"duration_sec,omitempty"`
	BWUnits      string           `json:"bw_units,omitempty"`
	PeerVersion  string           `json:"peer_version"`
	Local        []perfJSONDest   `json:"local"`
	Remote       []perfJSONDest   `json:"remote"`
	Results      []perfJSONResult `json:"results"`
}

// newPerfJSONReport fills the report's header part from the options.
func newPerfJSONReport(o *perfOptions, peerVersion string) *perfJSONReport {
	t := o.test
	j := &perfJSONReport{
		Test: t.String(), Role: "server", Device: o.devName, IBPort: o.ibPort,
		Connection: o.conn.String(), QPs: o.numQPs, Transport: o.transport,
		LinkType: o.linkType, MTU: 1 << (7 + o.curMTU), PostList: o.postList,
		Events: o.events, PeerVersion: peerVersion,
		Local: []perfJSONDest{}, Remote: []perfJSONDest{}, Results: []perfJSONResult{},
	}
	if o.client() {
		j.Role = "client"
		j.TXDepth = o.txDepth
	}
	if o.gidIndex != -1 {
		g := o.gidIndex
		j.GIDIndex = &g
	}
	if t.verb == perfAtomic {
		j.AtomicType = perfAtomicTypes[o.atomicType]
	}
	if t.verb == perfSend && !o.client() {
		j.RXDepth = o.rxDepth
	}
	if t.tst == perfBW {
		j.CQModeration = o.cqMod
		j.BWUnits = "MB/sec"
		if o.reportG {
			j.BWUnits = "Gb/sec"
		}
	}
	if t.verb == perfRead || t.verb == perfAtomic {
		r := o.outReads
		j.OutReads = &r
	} else {
		i := o.inline
		j.InlineSize = &i
	}
	if o.durationOn {
		j.DurationSec = o.duration
	}
	return j
}

func perfJSONDestOf(d perfDest, o *perfOptions) perfJSONDest {
	j := perfJSONDest{LID: d.LID, QPN: d.QPN, PSN: d.PSN}
	if o.test.verb == perfRead || o.test.verb == perfAtomic {
		j.OutReads = d.OutReads
	}
	if o.test.verb != perfSend {
		j.RKey, j.VAddr = d.RKey, d.VAddr
	}
	if o.gidIndex > -1 {
		j.GID = clib.Inet6String(d.GID)
	}
	return j
}

func perfJF(v float64) *perfJSONFloat { f := perfJSONFloat(v); return &f }

func (j *perfJSONReport) addBW(r perfBWReport, by string) {
	j.Results = append(j.Results, perfJSONResult{Bytes: r.Size, Iterations: r.Iters, MeasuredBy: by,
		BWPeak: perfJF(r.BWPeak), BWAvg: perfJF(r.BWAvg), MsgRate: perfJF(r.MsgRate)})
}

func (j *perfJSONReport) addLat(r perfLatReport) {
	j.Results = append(j.Results, perfJSONResult{Bytes: r.Size, Iterations: r.Iters, MeasuredBy: "local",
		TMin: perfJF(r.TMin), TMax: perfJF(r.TMax), TTypical: perfJF(r.TTypical), TAvg: perfJF(r.TAvg),
		TStdev: perfJF(r.TStdev), P99: perfJF(r.P99), P999: perfJF(r.P999)})
}

func (j *perfJSONReport) addLatDur(r perfLatDurReport) {
	j.Results = append(j.Results, perfJSONResult{Bytes: r.Size, Iterations: r.Iters, MeasuredBy: "local",
		TAvg: perfJF(r.TAvg), TPS: perfJF(r.TPS)})
}

// text is the report as printed: indented JSON and a newline.
func (j *perfJSONReport) text() string {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		// Every field marshals; this is a programming error.
		panic(err)
	}
	return string(b) + "\n"
}
