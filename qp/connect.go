package qp

import "github.com/rdmago/rdma/wr"

// Endpoint is one side of a connection as the other side needs to know
// it: what the two exchange out of band before RTR (rdma-core's pingpong
// examples send it over TCP).
type Endpoint struct {
	QPN uint32 // its QP number
	PSN uint32 // its first send PSN: the other side's RQ PSN
	LID uint16 // its port's LID (0 on RoCE)
	GID GID    // its GID; global routing is used when the interface ID is not zero
}

// Path is this side's choice of how to reach a peer, which the peer
// never sees: the local port, the local GID to send from, the service
// level.
type Path struct {
	PortNum uint8 // the local port
	// SGIDIndex is the local GID table index to send from when the peer's
	// GID is used (on RoCE v2, the index of a RoCE v2 entry).
	SGIDIndex uint8
	SL        uint8 // service level, 0 in the pingpong examples by default
}

// AH returns the address vector that reaches peer over p, as the pingpong
// examples build it: the GRH, with hop limit 1, only when the peer's GID
// has an interface ID (its low 8 bytes), which is always so on RoCE. It is
// the primary path of an RC or UC QP and the address handle of UD sends.
func (p Path) AH(peer Endpoint) AHAttr {
	ah := AHAttr{DLID: peer.LID, SL: p.SL, PortNum: p.PortNum}
	if [8]byte(peer.GID[8:]) != ([8]byte{}) {
		ah.IsGlobal = true
		ah.HopLimit = 1
		ah.DGID = peer.GID
		ah.SGIDIndex = p.SGIDIndex
	}
	return ah
}

// ToInit returns the attributes and mask of RESET→INIT as rdma-core's
// examples set them: RC and UC set the access flags, UD the Q_Key.
func ToInit(t Type, port uint8, pkeyIndex uint16, access wr.Access, qkey uint32) (Attr, AttrMask) {
	a := Attr{State: StateInit, PortNum: port, PKeyIndex: pkeyIndex}
	mask := AttrState | AttrPKeyIndex | AttrPort
	if t == UD {
		a.QKey = qkey
		return a, mask | AttrQKey
	}
	a.QPAccessFlags = access
	return a, mask | AttrAccessFlags
}

// ToRTR returns the attributes and mask of INIT→RTR towards peer over
// path, with path MTU mtu (an ibv_mtu code), as pp_connect_ctx in rc_pingpong.c,
// uc_pingpong.c and ud_pingpong.c does: RC also sets one responder
// resource (max_dest_rd_atomic) and min_rnr_timer 12 (0.64 ms); UD needs
// the state alone.
func ToRTR(t Type, peer Endpoint, path Path, mtu MTU) (Attr, AttrMask) {
	if t == UD {
		return Attr{State: StateRTR}, AttrState
	}
	a := Attr{
		State:     StateRTR,
		PathMTU:   mtu,
		DestQPNum: peer.QPN,
		RQPSN:     peer.PSN,
		AHAttr:    path.AH(peer),
	}
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	if t == UC {
		return a, mask
	}
	a.MaxDestRdAtomic = 1
	a.MinRNRTimer = 12
	return a, mask | AttrMaxDestRdAtomic | AttrMinRNRTimer
}

// ToRTS returns the attributes and mask of RTR→RTS with first send PSN
// sqPSN, as the pingpong examples set them: RC also sets timeout 14
// (about 67 ms), seven transport retries, infinite RNR retries (7) and one
// outstanding read or atomic; UC and UD set the PSN alone.
func ToRTS(t Type, sqPSN uint32) (Attr, AttrMask) {
	a := Attr{State: StateRTS, SQPSN: sqPSN}
	if t != RC {
		return a, AttrState | AttrSQPSN
	}
	a.Timeout = 14
	a.RetryCnt = 7
	a.RNRRetry = 7
	a.MaxRdAtomic = 1
	return a, AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
}
