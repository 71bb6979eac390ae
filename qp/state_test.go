package qp

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// The cases below are written from the kernel's qp_state_table
// (drivers/infiniband/core/verbs.c, Linux 6.x) directly, not from table,
// so that a typo in one shows up as a disagreement with the other. Error
// messages list attribute names in bit order.

func TestValidateAccepts(t *testing.T) {
	const (
		rtrRC = AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
		rtsRC = AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
	)
	tests := []struct {
		typ       Type
		cur, next State
		mask      AttrMask
	}{
		{RC, StateReset, StateReset, 0},
		{RC, StateReset, StateReset, AttrState},
		{RC, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{RC, StateInit, StateInit, 0},
		{RC, StateInit, StateInit, AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{RC, StateInit, StateInit, AttrState | AttrAccessFlags},
		{RC, StateInit, StateRTR, rtrRC},
		{RC, StateInit, StateRTR, rtrRC | AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
		{RC, StateRTR, StateRTS, rtsRC},
		{RC, StateRTR, StateRTS, rtsRC | AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState},
		{RC, StateRTS, StateRTS, 0},
		{RC, StateRTS, StateRTS, AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer},
		{RC, StateRTS, StateSQD, AttrState},
		{RC, StateRTS, StateSQD, AttrState | AttrEnSQDAsyncNotify},
		{RC, StateSQD, StateSQD, AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
			AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState},
		{RC, StateSQD, StateRTS, AttrState | AttrCurState | AttrMinRNRTimer},
		{RC, StateSQE, StateRTS, AttrState},
		{RC, StateErr, StateErr, 0},

		{UC, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{UC, StateInit, StateInit, AttrPort},
		{UC, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		{UC, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrAltPath | AttrPKeyIndex},
		{UC, StateRTR, StateRTS, AttrState | AttrSQPSN},
		{UC, StateRTR, StateRTS, AttrState | AttrSQPSN | AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState},
		{UC, StateRTS, StateRTS, AttrAccessFlags | AttrPathMigState},
		{UC, StateSQD, StateSQD, AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState},
		{UC, StateSQE, StateRTS, AttrState | AttrCurState | AttrAccessFlags},

		{UD, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrQKey},
		{UD, StateInit, StateInit, AttrQKey},
		{UD, StateInit, StateRTR, AttrState},
		{UD, StateInit, StateRTR, AttrState | AttrPKeyIndex | AttrQKey},
		{UD, StateRTR, StateRTS, AttrState | AttrSQPSN},
		{UD, StateRTR, StateRTS, AttrState | AttrSQPSN | AttrCurState | AttrQKey},
		{UD, StateRTS, StateRTS, AttrQKey},
		{UD, StateRTS, StateSQD, AttrState | AttrEnSQDAsyncNotify},
		{UD, StateSQD, StateSQD, AttrPKeyIndex | AttrQKey},
		{UD, StateSQD, StateRTS, AttrState | AttrQKey},
		{UD, StateSQE, StateRTS, AttrState | AttrCurState | AttrQKey},

		{XRCSend, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{XRCSend, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		{XRCSend, StateInit, StateRTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
		{XRCSend, StateRTR, StateRTS, rtsRC},
		{XRCSend, StateRTR, StateRTS, rtsRC | AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState},
		{XRCSend, StateRTS, StateRTS, AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState},
		{XRCSend, StateSQD, StateSQD, AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
			AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState},

		{XRCRecv, StateReset, StateInit, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{XRCRecv, StateInit, StateInit, AttrAccessFlags},
		{XRCRecv, StateInit, StateRTR, rtrRC},
		{XRCRecv, StateRTR, StateRTS, AttrState | AttrTimeout | AttrSQPSN},
		{XRCRecv, StateRTR, StateRTS, AttrState | AttrTimeout | AttrSQPSN | AttrCurState | AttrMinRNRTimer},
		{XRCRecv, StateRTS, StateRTS, AttrMinRNRTimer},
		{XRCRecv, StateRTS, StateSQD, AttrState | AttrEnSQDAsyncNotify},
		{XRCRecv, StateSQD, StateSQD, AttrPort | AttrAV | AttrTimeout | AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags |
			AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState},
	}
	for _, tt := range tests {
		if err := Validate(tt.typ, tt.cur, tt.next, tt.mask); err != nil {
			t.Errorf("Validate(%s, %v, %v, %v) = %v", tt.typ, tt.cur, tt.next, tt.mask, err)
		}
	}
	// Every state but RESET may go to RESET and ERR with STATE alone.
	for _, typ := range []Type{RC, UC, UD, XRCSend, XRCRecv} {
		for s := StateInit; s <= StateErr; s++ {
			for _, next := range []State{StateReset, StateErr} {
				if err := Validate(typ, s, next, AttrState); err != nil {
					t.Errorf("Validate(%s, %v, %v, STATE) = %v", typ, s, next, err)
				}
			}
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		typ       Type
		cur, next State
		mask      AttrMask
		missing   AttrMask
		forbidden AttrMask
		msg       string
	}{
		{typ: RC, cur: StateInit, next: StateRTR,
			mask:    AttrState | AttrAV | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			missing: AttrPathMTU,
			msg:     "qp: RC INIT→RTR needs STATE, AV, PATH_MTU, RQ_PSN, MIN_RNR_TIMER, MAX_DEST_RD_ATOMIC, DEST_QPN; missing PATH_MTU"},
		{typ: RC, cur: StateInit, next: StateRTR,
			mask:    AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			missing: AttrState},
		{typ: UC, cur: StateInit, next: StateRTR,
			mask:      AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic,
			forbidden: AttrMaxDestRdAtomic,
			msg:       "qp: UC INIT→RTR needs STATE, AV, PATH_MTU, RQ_PSN, DEST_QPN; may also set ACCESS_FLAGS, PKEY_INDEX, ALT_PATH; not allowed: MAX_DEST_RD_ATOMIC"},
		{typ: UD, cur: StateReset, next: StateInit,
			mask:    AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags,
			missing: AttrQKey, forbidden: AttrAccessFlags,
			msg: "qp: UD RESET→INIT needs STATE, PKEY_INDEX, PORT, QKEY; takes nothing else; missing QKEY; not allowed: ACCESS_FLAGS"},
		{typ: RC, cur: StateReset, next: StateInit,
			mask:      AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags | AttrQKey,
			forbidden: AttrQKey},
		{typ: RC, cur: StateInit, next: StateInit, mask: AttrCurState, forbidden: AttrCurState,
			msg: "qp: RC INIT→INIT may also set ACCESS_FLAGS, PKEY_INDEX, PORT; not allowed: CUR_STATE"},
		{typ: RC, cur: StateRTS, next: StateRTS, mask: AttrRateLimit, forbidden: AttrRateLimit},
		{typ: RC, cur: StateRTS, next: StateRTS, mask: AttrQKey | AttrCap, forbidden: AttrQKey | AttrCap},
		{typ: UD, cur: StateRTS, next: StateRTS, mask: AttrAccessFlags, forbidden: AttrAccessFlags},
		{typ: UD, cur: StateRTR, next: StateRTS, mask: AttrState | AttrSQPSN | AttrTimeout, forbidden: AttrTimeout},
		{typ: UD, cur: StateInit, next: StateRTR, mask: AttrState | AttrAV, forbidden: AttrAV},
		{typ: RC, cur: StateSQE, next: StateRTS, mask: AttrState | AttrCurState, forbidden: AttrCurState},
		{typ: RC, cur: StateRTS, next: StateErr, mask: AttrState | AttrPort, forbidden: AttrPort,
			msg: "qp: RC RTS→ERR needs STATE; takes nothing else; not allowed: PORT"},
		{typ: RC, cur: StateRTS, next: StateErr, mask: 0, missing: AttrState},
		{typ: UC, cur: StateRTR, next: StateRTS, mask: AttrState | AttrSQPSN | AttrMinRNRTimer, forbidden: AttrMinRNRTimer},
		{typ: XRCSend, cur: StateInit, next: StateRTR,
			mask:      AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			forbidden: AttrMaxDestRdAtomic | AttrMinRNRTimer,
			msg:       "qp: XRC_SEND INIT→RTR needs STATE, AV, PATH_MTU, RQ_PSN, DEST_QPN; may also set ACCESS_FLAGS, PKEY_INDEX, ALT_PATH; not allowed: MIN_RNR_TIMER, MAX_DEST_RD_ATOMIC"},
		{typ: XRCSend, cur: StateRTR, next: StateRTS, mask: AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic | AttrMinRNRTimer,
			forbidden: AttrMinRNRTimer},
		{typ: XRCRecv, cur: StateRTR, next: StateRTS, mask: AttrState | AttrSQPSN, missing: AttrTimeout},
		{typ: XRCRecv, cur: StateRTR, next: StateRTS, mask: AttrState | AttrTimeout | AttrSQPSN | AttrRetryCnt, forbidden: AttrRetryCnt},
		{typ: XRCRecv, cur: StateSQE, next: StateRTS, mask: AttrState | AttrCurState, forbidden: AttrCurState},

		{typ: RC, cur: StateReset, next: StateRTS, mask: AttrState,
			msg: "qp: RC RESET→RTS is not a valid transition"},
		{typ: RC, cur: StateReset, next: StateErr, mask: AttrState},
		{typ: UD, cur: StateRTR, next: StateRTR, mask: 0},
		{typ: UC, cur: StateInit, next: StateRTS, mask: AttrState | AttrSQPSN},
		{typ: RC, cur: StateUnknown, next: StateErr, mask: AttrState},
		{typ: RC, cur: StateRTS, next: State(9), mask: AttrState,
			msg: "qp: RC RTS→State(9) is not a valid transition"},
	}
	for _, tt := range tests {
		err := Validate(tt.typ, tt.cur, tt.next, tt.mask)
		if !errors.Is(err, unix.EINVAL) {
			t.Errorf("Validate(%s, %v, %v, %v) = %v, want EINVAL", tt.typ, tt.cur, tt.next, tt.mask, err)
			continue
		}
		var te *TransitionError
		if !errors.As(err, &te) {
			t.Errorf("Validate(%s, %v, %v, %v): %T is not a *TransitionError", tt.typ, tt.cur, tt.next, tt.mask, err)
			continue
		}
		if te.Missing != tt.missing || te.Forbidden != tt.forbidden {
			t.Errorf("Validate(%s, %v, %v, %v): missing %v, forbidden %v; want %v, %v",
				tt.typ, tt.cur, tt.next, tt.mask, te.Missing, te.Forbidden, tt.missing, tt.forbidden)
		}
		if tt.msg != "" && err.Error() != tt.msg {
			t.Errorf("error text\n got %s\nwant %s", err, tt.msg)
		}
	}
}

// TestValidateTransitions checks which (cur, next) pairs exist at all.
func TestValidateTransitions(t *testing.T) {
	valid := map[[2]State]bool{}
	for cur, nexts := range map[State][]State{
		StateReset: {StateReset, StateInit},
		StateInit:  {StateReset, StateErr, StateInit, StateRTR},
		StateRTR:   {StateReset, StateErr, StateRTS},
		StateRTS:   {StateReset, StateErr, StateRTS, StateSQD},
		StateSQD:   {StateReset, StateErr, StateRTS, StateSQD},
		StateSQE:   {StateReset, StateErr, StateRTS},
		StateErr:   {StateReset, StateErr},
	} {
		for _, next := range nexts {
			valid[[2]State{cur, next}] = true
		}
	}
	for _, typ := range []Type{RC, UC, UD, XRCSend, XRCRecv} {
		for cur := StateReset; cur <= StateUnknown; cur++ {
			for next := StateReset; next <= StateUnknown; next++ {
				err := Validate(typ, cur, next, ^AttrMask(0))
				var te *TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("Validate(%s, %v, %v, all) = %v", typ, cur, next, err)
				}
				if te.Valid != valid[[2]State{cur, next}] {
					t.Errorf("%s %v→%v: valid %v, want %v", typ, cur, next, te.Valid, !te.Valid)
				}
			}
		}
	}
}

func TestValidateOtherTypes(t *testing.T) {
	err := Validate(Type(8), StateReset, StateInit, AttrState|AttrPort)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Validate(raw packet) = %v, want EOPNOTSUPP", err)
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct {
		got  string
		want string
	}{
		{StateReset.String(), "RESET"},
		{StateRTS.String(), "RTS"},
		{StateUnknown.String(), "UNKNOWN"},
		{State(8).String(), "State(8)"},
		{AttrMask(0).String(), "0"},
		{(AttrState | AttrPort).String(), "STATE|PORT"},
		{(AttrRateLimit | AttrDestQPN | 1<<21 | 1<<30).String(), "DEST_QPN|RATE_LIMIT|0x40200000"},
		{(AttrMaxDestRdAtomic | AttrMinRNRTimer).String(), "MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC"},
		{UC.String(), "UC"},
		{Type(8).String(), "Type(8)"},
		{XRCSend.String(), "XRC_SEND"},
		{XRCRecv.String(), "XRC_RECV"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestValidateAllocs: a modify that passes the table costs no allocation;
// only a refusal builds its error.
func TestValidateAllocs(t *testing.T) {
	mask := AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
	if err := Validate(RC, StateReset, StateInit, mask); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { Validate(RC, StateReset, StateInit, mask) }); n != 0 {
		t.Errorf("Validate of an allowed transition: %v allocations, want 0", n)
	}
}
