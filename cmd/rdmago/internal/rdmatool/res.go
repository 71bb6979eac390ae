package rdmatool

import (
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/internal/abi"
)

// rdma resource: the objects the kernel tracks per device.

func (r *rd) cmdRes() error {
	return r.exec([]sub{
		{"", r.resShow}, {"show", r.resShow}, {"list", r.resShow}, {"help", r.resHelp},
	}, "resource command")
}

func (r *rd) resHelp() error {
	io.WriteString(r.stdout, `Usage: rdma resource
          resource show [DEV]
          resource show [qp|cm_id|pd|mr|cq|ctx|srq]
          resource show qp link [DEV/PORT]
          resource show qp link [DEV/PORT] [FILTER-NAME FILTER-VALUE]
          resource show cm_id link [DEV/PORT]
          resource show cm_id link [DEV/PORT] [FILTER-NAME FILTER-VALUE]
          resource show cq link [DEV/PORT]
          resource show cq link [DEV/PORT] [FILTER-NAME FILTER-VALUE]
          resource show pd dev [DEV]
          resource show pd dev [DEV] [FILTER-NAME FILTER-VALUE]
          resource show mr dev [DEV]
          resource show mr dev [DEV] [FILTER-NAME FILTER-VALUE]
          resource show ctx dev [DEV]
          resource show ctx dev [DEV] [FILTER-NAME FILTER-VALUE]
          resource show srq dev [DEV]
          resource show srq dev [DEV] [FILTER-NAME FILTER-VALUE]
`)
	return nil
}

// resKind is one kind of tracked object: its dump command, the table and
// entry attributes of its replies, its filters, whether it is shown per
// link (else per device) and how a line is printed.
type resKind struct {
	cmd     uint16
	table   uint16
	filters map[string]bool // name: numeric (else a string)
	perLink bool
	line    func(r *rd, dev attrs, e attrs)
}

var resKinds map[string]*resKind

func init() {
	resKinds = map[string]*resKind{
		"qp": {cmd: abi.RDMA_NLDEV_CMD_RES_QP_GET, table: abi.RDMA_NLDEV_ATTR_RES_QP, perLink: true, line: (*rd).qpLine,
			filters: map[string]bool{"link": false, "lqpn": true, "rqpn": true, "pid": true, "sq-psn": true, "rq-psn": true,
				"type": false, "path-mig-state": false, "state": false, "pdn": true}},
		"cm_id": {cmd: abi.RDMA_NLDEV_CMD_RES_CM_ID_GET, table: abi.RDMA_NLDEV_ATTR_RES_CM_ID, perLink: true, line: (*rd).cmIDLine,
			filters: map[string]bool{"link": false, "lqpn": true, "qp-type": false, "state": false, "ps": false, "pid": true,
				"src-addr": false, "src-port": true, "dst-addr": false, "dst-port": true, "cm-idn": true}},
		"cq": {cmd: abi.RDMA_NLDEV_CMD_RES_CQ_GET, table: abi.RDMA_NLDEV_ATTR_RES_CQ, line: (*rd).cqLine,
			filters: map[string]bool{"dev": false, "users": true, "poll-ctx": false, "pid": true, "cqn": true, "ctxn": true}},
		"mr": {cmd: abi.RDMA_NLDEV_CMD_RES_MR_GET, table: abi.RDMA_NLDEV_ATTR_RES_MR, line: (*rd).mrLine,
			filters: map[string]bool{"dev": false, "rkey": true, "lkey": true, "mrlen": true, "pid": true, "mrn": true, "pdn": true}},
		"pd": {cmd: abi.RDMA_NLDEV_CMD_RES_PD_GET, table: abi.RDMA_NLDEV_ATTR_RES_PD, line: (*rd).pdLine,
			filters: map[string]bool{"dev": false, "users": true, "pid": true, "ctxn": true, "pdn": true}},
		"ctx": {cmd: abi.RDMA_NLDEV_CMD_RES_CTX_GET, table: abi.RDMA_NLDEV_ATTR_RES_CTX, line: (*rd).ctxLine,
			filters: map[string]bool{"dev": false, "pid": true, "ctxn": true}},
	}
}

func (r *rd) resShow() error {
	// "res show DEV" is the summary of one device.
	if len(r.args) == 1 {
		if _, ok := r.lookup(r.argv(), false); ok {
			return r.execDev(r.resSummary)
		}
	}
	kind := func(name string) func() error {
		return func() error { return r.resObjects(resKinds[name]) }
	}
	return r.exec([]sub{
		{"", func() error { return r.execDev(r.resSummary) }},
		{"qp", kind("qp")}, {"cm_id", kind("cm_id")}, {"cq", kind("cq")}, {"mr", kind("mr")},
		{"pd", kind("pd")}, {"ctx", kind("ctx")}, {"srq", r.unsupported("rdma resource show srq")},
	}, "parameter")
}

// resSummary is a device's line of object counts.
func (r *rd) resSummary() error {
	as, err := r.request(abi.RDMA_NLDEV_CMD_RES_GET, 0, r.devEncoder(false))
	if err != nil {
		return err
	}
	p := r.p
	for _, a := range as {
		if !a.has(abi.RDMA_NLDEV_ATTR_DEV_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) || !a.has(abi.RDMA_NLDEV_ATTR_RES_SUMMARY) {
			continue
		}
		es, err := a.entries(abi.RDMA_NLDEV_ATTR_RES_SUMMARY)
		if err != nil {
			r.errf("error: %v\n", err)
			return errFailed
		}
		p.openObject()
		idx := a.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX)
		p.uint(jsonO, "ifindex", "", idx)
		p.uint(fp, "", "%d: ", idx)
		p.str(anyO, "ifname", "%s: ", a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME))
		for _, e := range es {
			if !e.has(abi.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME) || !e.has(abi.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR) {
				r.errf("error: a summary entry without name or count\n")
				return errFailed
			}
			n := e.str(abi.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME)
			p.uint(anyO, n, n+" %d ", e.uint(abi.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR))
		}
		p.newline()
	}
	return nil
}

// resObjects is "res show KIND [FILTER VALUE]...": the filters, then the
// objects of the device (or link) a "dev" (or "link") filter names, or of
// every one.
func (r *rd) resObjects(k *resKind) error {
	if err := r.buildFilters(k.filters); err != nil {
		return err
	}
	devKey := "dev"
	if k.perLink {
		devKey = "link"
	}
	r.args = nil
	if v, ok := r.filters[devKey]; ok {
		r.args = []string{v}
	}
	cb := func() error { return r.resDump(k) }
	if k.perLink {
		return r.execLink(cb, false)
	}
	return r.execDev(cb)
}

// buildFilters reads the FILTER VALUE pairs that follow the object kind.
func (r *rd) buildFilters(valid map[string]bool) error {
	r.filters = map[string]string{}
	if len(r.args) == 0 {
		return nil
	}
	if len(r.args) == 1 {
		r.errf("No filter data was supplied to filter option %s\n", r.args[0])
		return errFailed
	}
	if len(r.args)%2 != 0 {
		r.errf("There is filter option without data\n")
		return errFailed
	}
	for i := 0; i < len(r.args); i += 2 {
		key, val := r.args[i], r.args[i+1]
		if _, ok := valid[key]; !ok {
			r.errf("Unsupported filter option: %s\n", key)
			return errFailed
		}
		r.filters[key] = val
	}
	return nil
}

// numFiltered reports whether a line is filtered out by the numeric filter
// key: the attribute is absent, or its value is in none of the filter's
// comma-separated numbers and FIRST-LAST ranges.
func (r *rd) numFiltered(key string, a attrs, t uint16) bool {
	f, ok := r.filters[key]
	if !ok {
		return false
	}
	if !a.has(t) {
		return true
	}
	v := uint32(a.uint(t))
	return !numMatch(f, v)
}

func numMatch(f string, v uint32) bool {
	for _, s := range strings.Split(f, ",") {
		if lo, hi, ok := strings.Cut(s, "-"); ok {
			if uint32(clib.Atoi(lo)) <= v && v <= uint32(clib.Atoi(hi)) {
				return true
			}
		} else if uint32(clib.Atoi(s)) == v {
			return true
		}
	}
	return false
}

// strFiltered is numFiltered for a value printed as a string.
func (r *rd) strFiltered(key, v string, present bool) bool {
	f, ok := r.filters[key]
	if !ok {
		return false
	}
	if !present {
		return true
	}
	for _, s := range strings.Split(f, ",") {
		if s == v {
			return false
		}
	}
	return true
}

// resDump asks for the current device's objects of kind k and prints
// each entry.
func (r *rd) resDump(k *resKind) error {
	as, err := r.request(k.cmd, netlink.Dump, r.devEncoder(false))
	if err != nil {
		return err
	}
	for _, a := range as {
		if !a.has(abi.RDMA_NLDEV_ATTR_DEV_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) || !a.has(k.table) {
			continue
		}
		es, err := a.entries(k.table)
		if err != nil {
			r.errf("error: %v\n", err)
			return errFailed
		}
		for _, e := range es {
			k.line(r, a, e)
		}
	}
	return nil
}

// comm is the name of the object's owner: the task's command name for a
// user object (its first word, as the C tool's fscanf reads it; none if
// the task is gone), or the kernel module's.
func comm(e attrs) (string, bool) {
	var s string
	var ok bool
	if pid := e.uint(abi.RDMA_NLDEV_ATTR_RES_PID); e.has(abi.RDMA_NLDEV_ATTR_RES_PID) && pid != 0 {
		s, ok = procComm(pid)
	}
	if e.has(abi.RDMA_NLDEV_ATTR_RES_KERN_NAME) {
		s, ok = e.str(abi.RDMA_NLDEV_ATTR_RES_KERN_NAME), true
	}
	return s, ok
}

// procComm reads a task's command name; tests replace it.
var procComm = func(pid uint64) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(pid, 10) + "/comm")
	if err != nil {
		return "", false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

// printComm prints the owner: a kernel module's in brackets in plain
// output, cut to the C tool's 17 characters.
func (r *rd) printComm(e attrs) {
	s, ok := comm(e)
	if !ok {
		return
	}
	if !r.p.json && !e.has(abi.RDMA_NLDEV_ATTR_RES_PID) {
		s = "[" + s + "]"
	}
	if len(s) > 17 {
		s = s[:17]
	}
	r.p.str(anyO, "comm", "comm %s ", s)
}

// printLink is the "link DEV/PORT" of a per-link object.
func (r *rd) printLink(dev, e attrs) {
	p := r.p
	name := dev.str(abi.RDMA_NLDEV_ATTR_DEV_NAME)
	p.uint(jsonO, "ifindex", "", dev.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX))
	p.str(jsonO, "ifname", "", name)
	if e.has(abi.RDMA_NLDEV_ATTR_PORT_INDEX) {
		port := e.uint(abi.RDMA_NLDEV_ATTR_PORT_INDEX)
		p.uint(jsonO, "port", "", port)
		p.str(fp, "", "link %s ", name+"/"+strconv.FormatUint(port, 10))
	} else {
		p.str(fp, "", "link %s ", name+"/-")
	}
}

// printDevName is the "dev DEV" of a per-device object.
func (r *rd) printDevName(dev attrs) {
	r.p.uint(jsonO, "ifindex", "", dev.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX))
	r.p.str(anyO, "ifname", "dev %s ", dev.str(abi.RDMA_NLDEV_ATTR_DEV_NAME))
}

// u prints an unsigned attribute if the entry has it.
func (r *rd) u(e attrs, key string, t uint16) {
	if e.has(t) {
		r.p.uint(anyO, key, key+" %d ", e.uint(t))
	}
}

// key prints a key (or other hex value) if the entry has it.
func (r *rd) key(e attrs, key string, t uint16) {
	if e.has(t) {
		r.p.hex(key, key+" 0x%x ", e.uint(t))
	}
}

var (
	qpTypes   = []string{"SMI", "GSI", "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "UNKNOWN", "RAW_PACKET", "XRC_INI", "XRC_TGT"}
	qpStates  = []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
	pathMig   = []string{"MIGRATED", "REARM", "ARMED"}
	pollCtxs  = []string{"DIRECT", "SOFTIRQ", "WORKQUEUE", "UNBOUND_WORKQUEUE"}
	cmStates  = []string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}
	portSpace = map[uint64]string{0x0002: "IPoIB", 0x0106: "TCP", 0x0111: "UDP", 0x013f: "IB"}
)

// onPort reports whether a per-link entry belongs to the port being shown
// (port 0: the entries without a port).
func (r *rd) onPort(e attrs) bool {
	return uint32(e.uint(abi.RDMA_NLDEV_ATTR_PORT_INDEX)) == r.port
}

func (r *rd) qpLine(dev, e attrs) {
	const (
		lqpn = abi.RDMA_NLDEV_ATTR_RES_LQPN
		typ  = abi.RDMA_NLDEV_ATTR_RES_TYPE
		st   = abi.RDMA_NLDEV_ATTR_RES_STATE
		mig  = abi.RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE
	)
	if !e.has(lqpn) || !e.has(abi.RDMA_NLDEV_ATTR_RES_SQ_PSN) || !e.has(typ) || !e.has(st) || !r.onPort(e) {
		return
	}
	typeName := tableName(qpTypes, e.uint(typ), "UNKNOWN")
	stateName := tableName(qpStates, e.uint(st), "UNKNOWN")
	migName := tableName(pathMig, e.uint(mig), "UNKNOWN")
	if r.numFiltered("lqpn", e, lqpn) || r.numFiltered("pdn", e, abi.RDMA_NLDEV_ATTR_RES_PDN) ||
		r.numFiltered("rqpn", e, abi.RDMA_NLDEV_ATTR_RES_RQPN) || r.numFiltered("rq-psn", e, abi.RDMA_NLDEV_ATTR_RES_RQ_PSN) ||
		r.numFiltered("sq-psn", e, abi.RDMA_NLDEV_ATTR_RES_SQ_PSN) || r.strFiltered("path-mig-state", migName, e.has(mig)) ||
		r.strFiltered("type", typeName, true) || r.strFiltered("state", stateName, true) ||
		r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) {
		return
	}
	p := r.p
	p.openObject()
	r.printLink(dev, e)
	r.u(e, "lqpn", lqpn)
	r.u(e, "rqpn", abi.RDMA_NLDEV_ATTR_RES_RQPN)
	p.str(anyO, "type", "type %s ", typeName)
	p.str(anyO, "state", "state %s ", stateName)
	r.u(e, "rq-psn", abi.RDMA_NLDEV_ATTR_RES_RQ_PSN)
	r.u(e, "sq-psn", abi.RDMA_NLDEV_ATTR_RES_SQ_PSN)
	if e.has(mig) {
		p.str(anyO, "path-mig-state", "path-mig-state %s ", migName)
	}
	r.u(e, "pdn", abi.RDMA_NLDEV_ATTR_RES_PDN)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	p.newline()
}

// sockaddr decodes a __kernel_sockaddr_storage of AF_INET or AF_INET6.
func sockaddr(b []byte) (netip.Addr, uint16, bool) {
	if len(b) < 4 {
		return netip.Addr{}, 0, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b) {
	case 2: // AF_INET
		if len(b) >= 8 {
			return netip.AddrFrom4([4]byte(b[4:8])), port, true
		}
	case 10: // AF_INET6
		if len(b) >= 24 {
			return netip.AddrFrom16([16]byte(b[8:24])), port, true
		}
	}
	return netip.Addr{}, 0, false
}

func (r *rd) cmIDLine(dev, e attrs) {
	const (
		st  = abi.RDMA_NLDEV_ATTR_RES_STATE
		ps  = abi.RDMA_NLDEV_ATTR_RES_PS
		typ = abi.RDMA_NLDEV_ATTR_RES_TYPE
	)
	if !e.has(st) || !e.has(ps) || !r.onPort(e) {
		return
	}
	typeName := tableName(qpTypes, e.uint(typ), "UNKNOWN")
	stateName := tableName(cmStates, e.uint(st), "UNKNOWN")
	psName, ok := portSpace[e.uint(ps)]
	if !ok {
		psName = "---"
	}
	src, srcPort, srcOK := sockaddr(e.m[abi.RDMA_NLDEV_ATTR_RES_SRC_ADDR])
	dst, dstPort, dstOK := sockaddr(e.m[abi.RDMA_NLDEV_ATTR_RES_DST_ADDR])
	var srcStr, dstStr string
	if srcOK {
		srcStr = src.String()
	}
	if dstOK {
		dstStr = dst.String()
	}
	if r.numFiltered("lqpn", e, abi.RDMA_NLDEV_ATTR_RES_LQPN) || r.strFiltered("qp-type", typeName, e.has(typ)) ||
		r.strFiltered("state", stateName, true) || r.strFiltered("ps", psName, true) ||
		r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) || r.numFiltered("cm-idn", e, abi.RDMA_NLDEV_ATTR_RES_CM_IDN) ||
		r.strFiltered("src-addr", srcStr, srcOK) || r.portFiltered("src-port", srcPort, srcOK) ||
		r.strFiltered("dst-addr", dstStr, dstOK) || r.portFiltered("dst-port", dstPort, dstOK) {
		return
	}
	p := r.p
	p.openObject()
	r.printLink(dev, e)
	r.u(e, "cm-idn", abi.RDMA_NLDEV_ATTR_RES_CM_IDN)
	r.u(e, "lqpn", abi.RDMA_NLDEV_ATTR_RES_LQPN)
	if e.has(typ) {
		p.str(anyO, "qp-type", "qp-type %s ", typeName)
	}
	p.str(anyO, "state", "state %s ", stateName)
	p.str(anyO, "ps", "ps %s ", psName)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	if srcOK {
		p.str(anyO, "src-addr", "src-addr %s ", srcStr+":"+strconv.Itoa(int(srcPort)))
	}
	if dstOK {
		p.str(anyO, "dst-addr", "dst-addr %s ", dstStr+":"+strconv.Itoa(int(dstPort)))
	}
	p.newline()
}

func (r *rd) portFiltered(key string, port uint16, present bool) bool {
	f, ok := r.filters[key]
	if !ok {
		return false
	}
	return !present || !numMatch(f, uint32(port))
}

func (r *rd) cqLine(dev, e attrs) {
	const pc = abi.RDMA_NLDEV_ATTR_RES_POLL_CTX
	if !e.has(abi.RDMA_NLDEV_ATTR_RES_CQE) || !e.has(abi.RDMA_NLDEV_ATTR_RES_USECNT) {
		return
	}
	pollName := tableName(pollCtxs, e.uint(pc), "UNKNOWN")
	if r.numFiltered("users", e, abi.RDMA_NLDEV_ATTR_RES_USECNT) || r.strFiltered("poll-ctx", pollName, e.has(pc)) ||
		r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) || r.numFiltered("cqn", e, abi.RDMA_NLDEV_ATTR_RES_CQN) ||
		r.numFiltered("ctxn", e, abi.RDMA_NLDEV_ATTR_RES_CTXN) {
		return
	}
	p := r.p
	p.openObject()
	r.printDevName(dev)
	r.u(e, "cqn", abi.RDMA_NLDEV_ATTR_RES_CQN)
	r.u(e, "cqe", abi.RDMA_NLDEV_ATTR_RES_CQE)
	r.u(e, "users", abi.RDMA_NLDEV_ATTR_RES_USECNT)
	if e.has(pc) {
		p.str(anyO, "poll-ctx", "poll-ctx %s ", pollName)
	}
	if e.has(abi.RDMA_NLDEV_ATTR_DEV_DIM) {
		p.onOff("adaptive-moderation", "adaptive-moderation %s ", e.uint(abi.RDMA_NLDEV_ATTR_DEV_DIM) != 0)
	}
	r.u(e, "ctxn", abi.RDMA_NLDEV_ATTR_RES_CTXN)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	p.newline()
}

func (r *rd) mrLine(dev, e attrs) {
	if !e.has(abi.RDMA_NLDEV_ATTR_RES_MRLEN) {
		return
	}
	if r.numFiltered("rkey", e, abi.RDMA_NLDEV_ATTR_RES_RKEY) || r.numFiltered("lkey", e, abi.RDMA_NLDEV_ATTR_RES_LKEY) ||
		r.numFiltered("mrlen", e, abi.RDMA_NLDEV_ATTR_RES_MRLEN) || r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) ||
		r.numFiltered("mrn", e, abi.RDMA_NLDEV_ATTR_RES_MRN) || r.numFiltered("pdn", e, abi.RDMA_NLDEV_ATTR_RES_PDN) {
		return
	}
	r.p.openObject()
	r.printDevName(dev)
	r.u(e, "mrn", abi.RDMA_NLDEV_ATTR_RES_MRN)
	r.key(e, "rkey", abi.RDMA_NLDEV_ATTR_RES_RKEY)
	r.key(e, "lkey", abi.RDMA_NLDEV_ATTR_RES_LKEY)
	r.key(e, "iova", abi.RDMA_NLDEV_ATTR_RES_IOVA)
	r.u(e, "mrlen", abi.RDMA_NLDEV_ATTR_RES_MRLEN)
	r.u(e, "pdn", abi.RDMA_NLDEV_ATTR_RES_PDN)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	r.p.newline()
}

func (r *rd) pdLine(dev, e attrs) {
	if !e.has(abi.RDMA_NLDEV_ATTR_RES_USECNT) {
		return
	}
	if r.numFiltered("users", e, abi.RDMA_NLDEV_ATTR_RES_USECNT) || r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) ||
		r.numFiltered("ctxn", e, abi.RDMA_NLDEV_ATTR_RES_CTXN) || r.numFiltered("pdn", e, abi.RDMA_NLDEV_ATTR_RES_PDN) {
		return
	}
	r.p.openObject()
	r.printDevName(dev)
	r.u(e, "pdn", abi.RDMA_NLDEV_ATTR_RES_PDN)
	r.key(e, "local_dma_lkey", abi.RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY)
	r.u(e, "users", abi.RDMA_NLDEV_ATTR_RES_USECNT)
	r.key(e, "unsafe_global_rkey", abi.RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY)
	r.u(e, "ctxn", abi.RDMA_NLDEV_ATTR_RES_CTXN)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	r.p.newline()
}

func (r *rd) ctxLine(dev, e attrs) {
	if r.numFiltered("pid", e, abi.RDMA_NLDEV_ATTR_RES_PID) || r.numFiltered("ctxn", e, abi.RDMA_NLDEV_ATTR_RES_CTXN) {
		return
	}
	r.p.openObject()
	r.printDevName(dev)
	r.u(e, "ctxn", abi.RDMA_NLDEV_ATTR_RES_CTXN)
	r.u(e, "pid", abi.RDMA_NLDEV_ATTR_RES_PID)
	r.printComm(e)
	r.p.newline()
}
