package qp_test

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// The attributes of the usual RESET→INIT→RTR→RTS sequence of an RC QP,
// each checked as the kernel checks a modify. No device is needed; a
// program gives each attr and mask to uverbs.QP.Modify.
func Example_connect() {
	peer := qp.Endpoint{QPN: 0x11}            // from the peer, out of band
	path := qp.Path{PortNum: 1, SGIDIndex: 1} // this side's port and GID
	cur := qp.StateReset
	for _, step := range []func() (qp.Attr, qp.AttrMask){
		func() (qp.Attr, qp.AttrMask) { return qp.ToInit(qp.RC, 1, 0, wr.LocalWrite|wr.RemoteWrite, 0) },
		func() (qp.Attr, qp.AttrMask) { return qp.ToRTR(qp.RC, peer, path, qp.MTU1024) },
		func() (qp.Attr, qp.AttrMask) { return qp.ToRTS(qp.RC, 0) },
	} {
		attr, mask := step()
		fmt.Printf("%v→%v %v: %v\n", cur, attr.State, mask, qp.Validate(qp.RC, cur, attr.State, mask))
		cur = attr.State
	}
	// Output:
	// RESET→INIT STATE|ACCESS_FLAGS|PKEY_INDEX|PORT: <nil>
	// INIT→RTR STATE|AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN: <nil>
	// RTR→RTS STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN: <nil>
}

// Validate says what a refused transition lacks; the error matches
// EINVAL, the kernel's answer to it.
func ExampleValidate() {
	err := qp.Validate(qp.RC, qp.StateInit, qp.StateRTR, qp.AttrState|qp.AttrAV)
	var te *qp.TransitionError
	if errors.As(err, &te) {
		fmt.Println("missing:", te.Missing)
	}
	fmt.Println(errors.Is(err, syscall.EINVAL))
	// Output:
	// missing: PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN
	// true
}
