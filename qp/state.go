package qp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// perType is one mask for each transport Validate knows: xi and xt are
// XRC's initiator (XRCSend) and target (XRCRecv).
type perType struct{ rc, uc, ud, xi, xt AttrMask }

func (p perType) of(t Type) (AttrMask, bool) {
	switch t {
	case RC:
		return p.rc, true
	case UC:
		return p.uc, true
	case UD:
		return p.ud, true
	case XRCSend:
		return p.xi, true
	case XRCRecv:
		return p.xt, true
	}
	return 0, false
}

// transition is one entry of the kernel's qp_state_table: whether cur→next
// is allowed at all, and the attributes it requires and allows besides
// STATE.
type transition struct {
	valid    bool
	req, opt perType
}

// Masks shared by several entries.
const (
	initRCUC = AttrPKeyIndex | AttrPort | AttrAccessFlags
	initUD   = AttrPKeyIndex | AttrPort | AttrQKey
	toRTSUD  = AttrCurState | AttrQKey
	toRTSUC  = AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState
	toRTSRC  = toRTSUC | AttrMinRNRTimer
	sqdAll   = AttrEnSQDAsyncNotify
)

// table is qp_state_table from ib_modify_qp_is_ok in Linux 6.x
// (drivers/infiniband/core/verbs.c, torvalds/linux f4d8f354d753), reduced
// to the RC, UC, UD, XRC_INI and XRC_TGT columns. Every driver rdmago serves (rxe, mlx5)
// checks a modify against it and fails with EINVAL when it does not fit.
// Pairs not listed are invalid; note that RESET→ERR is not among them.
// RATE_LIMIT appears in the kernel's table for raw packet QPs only.
var table = [StateErr + 1][StateErr + 1]transition{
	StateReset: {
		StateReset: {valid: true},
		StateInit:  {valid: true, req: perType{rc: initRCUC, uc: initRCUC, ud: initUD, xi: initRCUC, xt: initRCUC}},
	},
	StateInit: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateInit:  {valid: true, opt: perType{rc: initRCUC, uc: initRCUC, ud: initUD, xi: initRCUC, xt: initRCUC}},
		StateRTR: {valid: true,
			req: perType{
				rc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
				uc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
				xi: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
				xt: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			},
			opt: perType{
				rc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				uc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				ud: AttrPKeyIndex | AttrQKey,
				xi: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				xt: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
			}},
	},
	StateRTR: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true,
			req: perType{
				rc: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
				uc: AttrSQPSN,
				ud: AttrSQPSN,
				xi: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
				xt: AttrTimeout | AttrSQPSN,
			},
			opt: perType{rc: toRTSRC, uc: toRTSUC, ud: toRTSUD, xi: toRTSUC, xt: toRTSRC}},
	},
	StateRTS: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true, opt: perType{
			rc: toRTSRC, uc: toRTSUC, ud: toRTSUD, xi: toRTSUC, xt: toRTSRC}},
		StateSQD: {valid: true, opt: perType{rc: sqdAll, uc: sqdAll, ud: sqdAll, xi: sqdAll, xt: sqdAll}},
	},
	StateSQD: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS:   {valid: true, opt: perType{rc: toRTSRC, uc: toRTSUC, ud: toRTSUD, xi: toRTSUC, xt: toRTSRC}},
		StateSQD: {valid: true, opt: perType{
			rc: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
				AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer |
				AttrPathMigState,
			uc: AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
			ud: AttrPKeyIndex | AttrQKey,
			xi: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
				AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
			xt: AttrPort | AttrAV | AttrTimeout | AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags |
				AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState,
		}},
	},
	StateSQE: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		// The kernel lists no attributes for RC here: an RC QP never
		// enters SQE, but STATE alone passes the check.
		StateRTS: {valid: true, opt: perType{uc: AttrCurState | AttrAccessFlags, ud: toRTSUD}},
	},
	StateErr: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
	},
}

// TransitionError is a modify that ib_modify_qp_is_ok would refuse. It
// wraps unix.EINVAL, the kernel's answer to it.
type TransitionError struct {
	Type      Type
	Cur, Next State
	// Valid is false when Cur→Next is not a transition at all; the masks
	// below are then zero.
	Valid     bool
	Required  AttrMask // what the transition needs, STATE included when Cur ≠ Next
	Optional  AttrMask // what it also accepts
	Missing   AttrMask // required but absent from the mask
	Forbidden AttrMask // present in the mask but neither required nor optional
}

func (e *TransitionError) Error() string {
	s := fmt.Sprintf("qp: %s %v→%v", e.Type, e.Cur, e.Next)
	if !e.Valid {
		return s + " is not a valid transition"
	}
	if e.Required != 0 {
		s += " needs " + e.Required.join(", ")
	}
	if e.Forbidden != 0 {
		if e.Required != 0 {
			s += ";"
		}
		if e.Optional != 0 {
			s += " may also set " + e.Optional.join(", ")
		} else {
			s += " takes nothing else"
		}
	}
	if e.Missing != 0 {
		s += "; missing " + e.Missing.join(", ")
	}
	if e.Forbidden != 0 {
		s += "; not allowed: " + e.Forbidden.join(", ")
	}
	return s
}

// Unwrap returns unix.EINVAL.
func (e *TransitionError) Unwrap() error { return unix.EINVAL }

// Validate checks that a modify with mask may move a QP of type t from cur
// to next, by the rules of the kernel's ib_modify_qp_is_ok (see table). A
// mask without AttrState modifies attributes in the current state, so next
// must then equal cur; with AttrCurState, cur is the Attr's CurState, as
// the drivers take it. The error is a *TransitionError naming the missing
// and the forbidden attributes; it wraps unix.EINVAL. Validate knows RC, UC,
// UD, XRCSend and XRCRecv; for other types it returns an error wrapping unix.EOPNOTSUPP, and
// the check is the kernel's alone.
func Validate(t Type, cur, next State, mask AttrMask) error {
	if _, ok := (perType{}).of(t); !ok {
		return fmt.Errorf("qp: no transition rules for %s: %w", t, unix.EOPNOTSUPP)
	}
	// The error is made only on failure: a modify that passes, the common
	// case, allocates nothing here.
	if cur > StateErr || next > StateErr || !table[cur][next].valid {
		return &TransitionError{Type: t, Cur: cur, Next: next}
	}
	tr := table[cur][next]
	req, _ := tr.req.of(t)
	opt, _ := tr.opt.of(t)
	if cur != next {
		req |= AttrState
	}
	// The kernel accepts STATE on a cur→cur modify too.
	allowed := req | opt | AttrState
	// ib_modify_qp_is_ok refuses CUR_STATE outside RTR, RTS, SQD and SQE
	// before it looks at the table.
	if cur < StateRTR || cur > StateSQE {
		allowed &^= AttrCurState
	}
	missing, forbidden := req&^mask, mask&^allowed
	if missing != 0 || forbidden != 0 {
		return &TransitionError{Type: t, Cur: cur, Next: next, Valid: true,
			Required: req, Optional: opt, Missing: missing, Forbidden: forbidden}
	}
	return nil
}
