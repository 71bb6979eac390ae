//go:build linux && amd64

package main

import "fmt"

// The device's view of the fake kernel's SRQs (the rest of its tables are
// in tables.go).

func srqKey(srqn uint32) string { return fmt.Sprintf("srq%#x", srqn) }

func (t tables) srqs() []*dSRQ {
	var out []*dSRQ
	for _, s := range t.k.SRQs() {
		d := &dSRQ{key: srqKey(s.SRQN), srqn: s.SRQN, buf: uint64(s.Buf), db: uint64(s.DBRec),
			cnt: s.WQECount, shift: uint(s.WQEShift), mem: t.mem(s.File), uidx: s.UIdx}
		if s.XRCD != nil {
			d.xrcdn, d.cq = s.XRCD.XRCDN, &dCQ{cqn: s.CQ.CQN}
		}
		out = append(out, d)
	}
	return out
}

// qpSRQN returns the number of the SRQ the QP receives from, 0 if none.
func (t tables) qpSRQN(qpn uint32) uint32 {
	for _, q := range t.k.QPs() {
		if q.QPN != qpn || q.SRQ == ^uint32(0) {
			continue
		}
		for _, s := range t.k.SRQs() {
			if s.File == q.File && s.Handle == q.SRQ {
				return s.SRQN
			}
		}
	}
	return 0
}
