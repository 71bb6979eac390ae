package qp

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmago/rdma/wr"
)

// roceGID is ::ffff:192.168.1.2, a RoCE v2 GID.
var roceGID = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 2}

func TestConnectSequence(t *testing.T) {
	r, path := Endpoint{QPN: 0x11, PSN: 0x222, LID: 0, GID: roceGID}, Path{SGIDIndex: 1, PortNum: 1}
	for _, typ := range []Type{RC, UC, UD} {
		ini, iniMask := ToInit(typ, 1, 0, wr.RemoteWrite|wr.RemoteRead, 0x11111111)
		rtr, rtrMask := ToRTR(typ, r, path, 3)
		rts, rtsMask := ToRTS(typ, 0x333)
		for _, err := range []error{
			Validate(typ, StateReset, ini.State, iniMask),
			Validate(typ, StateInit, rtr.State, rtrMask),
			Validate(typ, StateRTR, rts.State, rtsMask),
		} {
			if err != nil {
				t.Errorf("%s: %v", typ, err)
			}
		}
	}
}

func TestConnectAttrs(t *testing.T) {
	r, path := Endpoint{QPN: 0x11, PSN: 0x222, GID: roceGID}, Path{SGIDIndex: 1, PortNum: 2, SL: 0}
	ah := AHAttr{PortNum: 2, IsGlobal: true, HopLimit: 1, DGID: roceGID, SGIDIndex: 1}

	a, m := ToInit(UD, 1, 0, wr.RemoteWrite, 0x11111111)
	if d := cmp.Diff(Attr{State: StateInit, PortNum: 1, QKey: 0x11111111}, a); d != "" || m != AttrState|AttrPKeyIndex|AttrPort|AttrQKey {
		t.Errorf("UD INIT: mask %v, attr (-want +got):\n%s", m, d)
	}
	a, m = ToInit(RC, 1, 2, wr.RemoteWrite, 0x11111111)
	if d := cmp.Diff(Attr{State: StateInit, PortNum: 1, PKeyIndex: 2, QPAccessFlags: wr.RemoteWrite}, a); d != "" || m != AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags {
		t.Errorf("RC INIT: mask %v, attr (-want +got):\n%s", m, d)
	}

	a, m = ToRTR(RC, r, path, 5)
	want := Attr{State: StateRTR, PathMTU: 5, DestQPNum: 0x11, RQPSN: 0x222, AHAttr: ah, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	if d := cmp.Diff(want, a); d != "" || m != AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer {
		t.Errorf("RC RTR: mask %v, attr (-want +got):\n%s", m, d)
	}
	a, m = ToRTR(UC, r, path, 5)
	want = Attr{State: StateRTR, PathMTU: 5, DestQPNum: 0x11, RQPSN: 0x222, AHAttr: ah}
	if d := cmp.Diff(want, a); d != "" || m != AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN {
		t.Errorf("UC RTR: mask %v, attr (-want +got):\n%s", m, d)
	}
	if a, m = ToRTR(UD, r, path, 5); a != (Attr{State: StateRTR}) || m != AttrState {
		t.Errorf("UD RTR: %v %+v", m, a)
	}

	a, m = ToRTS(RC, 0x333)
	want = Attr{State: StateRTS, SQPSN: 0x333, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	if d := cmp.Diff(want, a); d != "" || m != AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic {
		t.Errorf("RC RTS: mask %v, attr (-want +got):\n%s", m, d)
	}
	for _, typ := range []Type{UC, UD} {
		if a, m = ToRTS(typ, 0x333); a != (Attr{State: StateRTS, SQPSN: 0x333}) || m != AttrState|AttrSQPSN {
			t.Errorf("%s RTS: %v %+v", typ, m, a)
		}
	}
}

func TestPathAH(t *testing.T) {
	// An IB peer with a link-local GID whose interface ID is zero, as an
	// example run without -g sends: no GRH, the LID routes.
	peer := Endpoint{LID: 7, GID: [16]byte{0: 0xfe, 1: 0x80}}
	if got, want := (Path{SGIDIndex: 3, PortNum: 1, SL: 2}).AH(peer), (AHAttr{DLID: 7, SL: 2, PortNum: 1}); got != want {
		t.Errorf("IB AH = %+v, want %+v", got, want)
	}
}
