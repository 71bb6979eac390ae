package uverbs

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmago/rdma/wr"
)

// scriptCQ is a provider CQ that hands out the completions it was given.
type scriptCQ struct{ wcs []wr.Completion }

func (s *scriptCQ) Poll(wc []wr.Completion) int {
	n := copy(wc, s.wcs)
	s.wcs = s.wcs[n:]
	return n
}
func (s *scriptCQ) ReqNotify(bool) error { return nil }
func (s *scriptCQ) Close() error         { return nil }

// Probe completions never reach the program, whoever polls first, late
// ones included; everything else comes back once, in the device's order,
// when the check polled part of it first (harvest).
func TestKeepAliveProbesHidden(t *testing.T) {
	_, c := objectContext(t)
	sc := &scriptCQ{}
	cq := &CQ{object: newObject(c, kindCQ, 1), prov: sc, cqe: 8}
	const qpn, other = 0x11, 0x22
	p := cq.probesOf(qpn)
	probe := func(st wr.Status) wr.Completion {
		return wr.Completion{ID: probeWRID, QPNum: qpn, Status: st, Opcode: wr.WCRDMAWrite}
	}
	user := func(id uint64) wr.Completion { return wr.Completion{ID: id, QPNum: qpn, Opcode: wr.WCSend} }
	out := func(n int) { p.sent.Add(uint64(n)); cq.probing.Add(int32(n)) }

	// Two probes out; the device has user work around them, and a
	// completion of another QP that happens to carry the probes' ID.
	out(2)
	sc.wcs = []wr.Completion{user(1), probe(wr.Success), user(2),
		{ID: probeWRID, QPNum: other, Opcode: wr.WCRDMAWrite}, user(3), probe(wr.Success), user(4)}
	cq.harvest() // takes them all: four fit, the CQ holds 8
	if got := cq.aheadN.Load(); got != 5 {
		t.Fatalf("harvest kept %d completions, want 5", got)
	}
	if p.outstanding() || p.failed.Load() != 0 || cq.probing.Load() != 0 {
		t.Fatalf("after harvest: sent %d acked %d failed %d probing %d", p.sent.Load(), p.acked.Load(), p.failed.Load(), cq.probing.Load())
	}
	// A probe flushed after the check stopped (its QP closed) is still
	// hidden; the device's later completions follow the harvested ones.
	out(1)
	sc.wcs = []wr.Completion{user(5), probe(wr.WRFlushErr), user(6)}
	var got []uint64
	wc := make([]wr.Completion, 3)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		for _, c := range wc[:n] {
			if c.ID == probeWRID && c.QPNum == qpn {
				t.Fatalf("a probe completion reached the program: %+v", c)
			}
			got = append(got, c.ID)
		}
	}
	want := []uint64{1, 2, probeWRID, 3, 4, 5, 6}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("completions (-want +got):\n%s", diff)
	}
	if p.failed.Load() != uint32(wr.WRFlushErr) {
		t.Errorf("failed probe status %d, want %d", p.failed.Load(), wr.WRFlushErr)
	}
	// With nothing outstanding, a completion with the probes' ID is the
	// program's.
	sc.wcs = []wr.Completion{probe(wr.Success)}
	if n, _ := cq.Poll(wc); n != 1 {
		t.Errorf("a completion with the probe ID and no probe out: %d returned, want 1", n)
	}
}

// A probe taken out of a poll leaves no completion behind it: programs poll
// one completion at a time and take a short count for an empty CQ (rping
// then waits for the next event, which a completion that arrived before
// the CQ was armed never raises). Seen as pings pausing for the keepalive's
// harvest, 0.76 s with rping -K 2000.
func TestKeepAliveProbeLeavesNoGap(t *testing.T) {
	_, c := objectContext(t)
	sc := &scriptCQ{}
	cq := &CQ{object: newObject(c, kindCQ, 1), prov: sc, cqe: 8}
	const qpn = 0x11
	p := cq.probesOf(qpn)
	p.sent.Add(2)
	cq.probing.Add(2)
	probe := wr.Completion{ID: probeWRID, QPNum: qpn, Opcode: wr.WCRDMAWrite}
	sc.wcs = []wr.Completion{probe, probe, {ID: 7, QPNum: qpn, Opcode: wr.WCSend}}
	var wc [1]wr.Completion
	n, err := cq.Poll(wc[:])
	if err != nil || n != 1 || wc[0].ID != 7 {
		t.Fatalf("Poll of one behind two probes: %d %+v, %v; want the send", n, wc[0], err)
	}
	if n, _ := cq.Poll(wc[:]); n != 0 {
		t.Errorf("then %d more, want an empty CQ", n)
	}
}
