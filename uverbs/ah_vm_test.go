package uverbs_test

import (
	"bytes"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

const grhSize = 40 // UD receives start with room for the GRH

// TestDeviceUDSend sends a datagram through an address handle to a UD QP.
func TestDeviceUDSend(t *testing.T) {
	r := rdmatest.NewPair(t, qp.UD, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ah, err := r.PD.CreateAH(qp.AHAttr{IsGlobal: true, DGID: r.GID, SGIDIndex: r.GIDIndex, HopLimit: 1, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	msg := []byte("datagram with an address handle")
	copy(r.A.Buf.Bytes(), msg)
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 11, SGList: []wr.SGE{r.B.Buf.SGE(0, grhSize+256)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSendWithImm, Imm: 99, Flags: wr.Signaled,
		SGList: []wr.SGE{r.A.Buf.SGE(0, len(msg))}, AH: ah, RemoteQPN: r.B.QP.Num(), RemoteQKey: rdmatest.QKey}}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 1, wr.WCSend)
	c := rdmatest.WaitWC(t, r.B.CQ, 1)[0]
	rdmatest.WantOK(t, c, 11, wr.WCRecv)
	if c.SrcQP != r.A.QP.Num() {
		t.Errorf("UD receive from QP %d, want %d", c.SrcQP, r.A.QP.Num())
	}
	if int(c.ByteLen) != grhSize+len(msg) || c.Imm != 99 || c.Flags&wr.WCGRH == 0 {
		t.Errorf("UD receive %+v: want %d bytes with a GRH and immediate 99", c, grhSize+len(msg))
	}
	if got := r.B.Buf.Bytes()[grhSize : grhSize+len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("UD payload %q", got)
	}
	// A UD send without an address handle is refused before the queue.
	if n, err := r.A.QP.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSend, SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}}}); n != 0 || err == nil {
		t.Errorf("UD send without an AH: %d, %v", n, err)
	}
}
