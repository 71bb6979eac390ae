package uverbs

import (
	"encoding/binary"
	"testing"
)

// FuzzAsyncEvents feeds the async event file's bytes to the decoder and
// names the objects of each event through a registry that knows none:
// every whole record is one event, and nothing panics.
func FuzzAsyncEvents(f *testing.F) {
	rec := func(elem uint64, typ uint32) []byte {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint64(b, elem)
		binary.NativeEndian.PutUint32(b[8:], typ)
		return b
	}
	f.Add(rec(1, uint32(EventCQErr)))
	f.Add(append(rec(7, uint32(EventQPFatal)), rec(1, uint32(EventPortActive))...))
	f.Add(rec(^uint64(0), 0xffffffff)[:13])
	c := &Context{reg: &registry{cqs: map[uint64]entry[CQ]{}, qps: map[uint64]entry[QP]{}, srqs: map[uint64]entry[SRQ]{}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 32*16 {
			b = b[:32*16] // one read's worth
		}
		var out [32]rawEvent
		evs := parseAsyncEvents(b, &out)
		if len(evs) != len(b)/16 {
			t.Fatalf("%d bytes gave %d events", len(b), len(evs))
		}
		for _, e := range evs {
			ev := c.decodeEvent(e)
			_ = ev.String()
			if ev.CQ != nil || ev.QP != nil || ev.SRQ != nil {
				t.Fatalf("event %v names an object no one registered", ev)
			}
		}
	})
}

// FuzzCompEvents feeds a completion channel's bytes to its decoder.
func FuzzCompEvents(f *testing.F) {
	f.Add(make([]byte, 8))
	f.Add(make([]byte, 16*8))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out [16]uint64
		hs := parseCompEvents(b, &out)
		if want := min(len(b)/8, 16); len(hs) != want {
			t.Fatalf("%d bytes gave %d events, want %d", len(b), len(hs), want)
		}
	})
}
