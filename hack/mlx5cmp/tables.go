//go:build linux && amd64

package main

import (
	"fmt"
	"strings"

	"github.com/rdmago/rdma/hack/mlx5cmp/fake"
)

// tables is the device's view of the fake kernel's objects.
type tables struct {
	k    *fake.Kernel
	open func(*fake.File) *openFile // nil for a file no longer open
}

func newDevice(k *fake.Kernel, t *transcript, open func(*fake.File) *openFile) *device {
	return &device{kern: tables{k, open}, out: t, names: newRegions(), qps: map[uint32]*dQP{}, cqs: map[uint32]*dCQ{}}
}

// mem is the memory of the process that opened f.
func (t tables) mem(f *fake.File) remoteMem {
	if of := t.open(f); of != nil {
		return remoteMem{pid: of.pid}
	}
	return remoteMem{pid: -1}
}

func (t tables) devmem(f *fake.File) []byte {
	if of := t.open(f); of != nil {
		return of.devmem
	}
	return nil
}

func cqKey(cqn uint32) string { return fmt.Sprintf("cq%#x", cqn) }
func qpKey(qpn uint32) string { return fmt.Sprintf("qp%#x", qpn) }

func (t tables) cqs() []*dCQ {
	var out []*dCQ
	for _, c := range t.k.CQs() {
		out = append(out, &dCQ{key: cqKey(c.CQN), cqn: c.CQN, buf: uint64(c.Buf), size: uint32(c.CQESize), ncqe: uint32(c.NCQE), db: uint64(c.DBRec), mem: t.mem(c.File)})
	}
	return out
}

func (t tables) qps() []*dQP {
	var out []*dQP
	for _, q := range t.k.QPs() {
		typ := map[uint32]string{2: "rc", 3: "uc", 4: "ud", 9: "xrc_send", 10: "xrc_recv"}[q.Type]
		d := &dQP{key: qpKey(q.QPN), qpn: q.QPN, uidx: q.UIdx, typ: typ,
			sq: uint64(q.Buf) + uint64(q.SQOffset), rq: uint64(q.Buf) + uint64(q.RQOffset),
			sqCnt: q.SQWQECount, rqCnt: q.RQWQECount, rqShift: uint(q.RQWQEShift), db: uint64(q.DBRec),
			peer: q.Attr.Dest_qp_num, srq: q.SRQ != ^uint32(0), mem: t.mem(q.File)}
		if q.SQBuf != 0 {
			d.sq = uint64(q.SQBuf)
		}
		if q.XRCD != nil {
			d.xrcdn = q.XRCD.XRCDN
		}
		if q.SendCQ != nil {
			d.sendCQ = &dCQ{cqn: q.SendCQ.CQN}
		}
		if q.RecvCQ != nil {
			d.recvCQ = &dCQ{cqn: q.RecvCQ.CQN}
		}
		out = append(out, d)
	}
	return out
}

func (t tables) mrs() []dMR {
	var out []dMR
	for _, m := range t.k.MRs() {
		out = append(out, dMR{addr: uint64(m.Addr), length: m.Length, lkey: m.LKey, rkey: m.RKey, pid: t.mem(m.File).pid})
	}
	return out
}

func (t tables) uarPages() []uarPage {
	var out []uarPage
	for _, u := range t.k.UARs() {
		mem := t.devmem(u.File)
		if mem == nil || int(u.Offset)+4096 > len(mem) {
			continue
		}
		kind := "bf"
		if u.NC {
			kind = "nc"
		}
		out = append(out, uarPage{name: fmt.Sprintf("uar%d.%s", u.PageID, kind), mem: mem[u.Offset : u.Offset+4096]})
	}
	// A context without dynamic UARs rings its doorbells and copies its
	// BlueFlame WQEs through the static pages it mapped when it opened.
	for _, u := range t.k.SysUARs() {
		mem := t.devmem(u.File)
		if mem == nil || int(u.Offset)+4096 > len(mem) {
			continue
		}
		out = append(out, uarPage{name: fmt.Sprintf("uar%d.sys", u.PageID), mem: mem[u.Offset : u.Offset+4096]})
	}
	return out
}

// refresh names the regions of the kernel's live objects, so that the
// addresses of the command being rendered, and of every WQE, read as
// (region, offset).
func (d *device) refresh() {
	t := d.kern.(tables)
	for _, m := range t.k.MRs() {
		n := fmt.Sprintf("mr%d", m.Handle)
		d.names.add(n, uint64(m.Addr), m.Length)
		d.names.addKey(n+".lkey", m.LKey)
		d.names.addKey(n+".rkey", m.RKey)
	}
	for _, c := range t.k.CQs() {
		d.names.add(cqKey(c.CQN)+".buf", uint64(c.Buf), uint64(c.NCQE*c.CQESize))
		d.names.add(cqKey(c.CQN)+".db", uint64(c.DBRec), 8)
	}
	for _, s := range t.k.SRQs() {
		d.names.add(srqKey(s.SRQN)+".buf", uint64(s.Buf), uint64(s.WQECount)<<s.WQEShift)
		d.names.add(srqKey(s.SRQN)+".db", uint64(s.DBRec), 4)
	}
	for _, q := range t.k.QPs() {
		end := max(q.RQOffset+int(q.RQWQECount<<q.RQWQEShift), q.SQOffset+int(q.SQWQECount)*64)
		d.names.add(qpKey(q.QPN)+".buf", uint64(q.Buf), uint64(end))
		d.names.add(qpKey(q.QPN)+".db", uint64(q.DBRec), 8)
	}
}

// event renders one command of the kernel's: as fake.Event's String, with
// addresses named by region, user handles by order of appearance, and
// without the sequence number (the drivers send different numbers of
// queries, which would renumber everything after them).
func (t *transcript) event(d *device, e fake.Event) {
	d.refresh()
	var b strings.Builder
	fmt.Fprintf(&b, "cmd f%d %s ", e.File, e.Path)
	if e.Object != "" {
		b.WriteString(e.Object + ".")
	}
	b.WriteString(e.Method)
	field := func(f fake.Field) {
		switch v := f.Value.(type) {
		case fake.Addr:
			fmt.Fprintf(&b, "%s=%s", f.Name, d.names.addr(uint64(v)))
		case fake.UserHandle:
			fmt.Fprintf(&b, "%s=%s", f.Name, d.userHandle(uint64(v)))
		case uint64:
			if strings.HasSuffix(f.Name, "_FD") || f.Name == "FD_HANDLE" || f.Name == "COMP_CHANNEL" {
				// A descriptor's number is the process's, not the driver's.
				fmt.Fprintf(&b, "%s=%s", f.Name, d.fdName(v))
				break
			}
			b.WriteString(f.String())
		default:
			b.WriteString(f.String())
		}
	}
	b.WriteString(" in{")
	for i, f := range e.In {
		if i > 0 {
			b.WriteByte(' ')
		}
		field(f)
	}
	b.WriteString("} out{")
	for i, f := range e.Out {
		if i > 0 {
			b.WriteByte(' ')
		}
		field(f)
	}
	b.WriteString("} = ")
	if e.Errno != 0 {
		fmt.Fprintf(&b, "-%d", int(e.Errno))
		if e.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.Note)
		}
	} else {
		fmt.Fprintf(&b, "%d", e.Ret)
	}
	t.lines = append(t.lines, b.String())
}

func (d *device) userHandle(v uint64) string { return firstSeen(&d.uh, "uh", v) }

func (d *device) fdName(v uint64) string { return firstSeen(&d.fds, "fd", v) }

// firstSeen names v prefix0, prefix1, ... in the order values appear: a
// value the process chose (an object's address, a descriptor's number)
// named so that two processes doing the same things name it alike.
func firstSeen(m *map[uint64]string, prefix string, v uint64) string {
	if *m == nil {
		*m = map[uint64]string{}
	}
	if n, ok := (*m)[v]; ok {
		return n
	}
	n := fmt.Sprintf("%s%d", prefix, len(*m))
	(*m)[v] = n
	return n
}
