package uverbs_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// side is one process's half of TestDeviceTwoProcesses.
type side struct {
	ctx      *uverbs.Context
	pd       *uverbs.PD
	cq       *uverbs.CQ
	qp       *uverbs.QP
	buf      *mr.Region
	gid      [16]byte
	gidIndex uint8
}

func newSide(t *testing.T) *side {
	t.Helper()
	s := &side{}
	s.ctx, s.pd = rdmatest.OpenPD(t)
	var err error
	if s.cq, err = s.ctx.CreateCQ(uverbs.CQAttr{CQE: 16}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cq.Close() })
	if s.buf, err = mr.New(s.pd, 4096, rdmatest.AllAccess); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.buf.Close() })
	if s.qp, err = s.pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Caps: qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.qp.Close() })
	s.gidIndex, s.gid = rdmatest.RoCEv2GID(t, s.ctx)
	return s
}

// hello is the out-of-band exchange: QP number, buffer address and rkey.
func (s *side) hello() string {
	return fmt.Sprintf("%d %d %d\n", s.qp.Num(), s.buf.Addr(), s.buf.RKey())
}

type peerInfo struct {
	qpn  uint32
	addr uint64
	rkey uint32
}

func readHello(t *testing.T, r *bufio.Reader) peerInfo {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the peer's hello: %v (%q)", err, line)
	}
	var p peerInfo
	if _, err := fmt.Sscan(line, &p.qpn, &p.addr, &p.rkey); err != nil {
		t.Fatalf("peer's hello %q: %v", line, err)
	}
	return p
}

func (s *side) connect(t *testing.T, p peerInfo) {
	t.Helper()
	rdmatest.ConnectQP(t, s.qp, qp.Endpoint{QPN: p.qpn, GID: s.gid}, qp.Path{SGIDIndex: s.gidIndex, PortNum: 1})
}

// exchange writes msg into the peer's buffer at offset 0, then sends a
// notification (send with immediate), and waits for the peer's.
func (s *side) exchange(t *testing.T, p peerInfo, msg string, imm uint32) wr.Completion {
	t.Helper()
	copy(s.buf.Bytes()[2048:], msg)
	if _, err := s.qp.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{s.buf.SGE(2048, len(msg))}, Remote: wr.Remote{Addr: p.addr, RKey: p.rkey}},
		{ID: 2, Opcode: wr.OpSendWithImm, Imm: imm, Flags: wr.Signaled},
	}); err != nil {
		t.Fatal(err)
	}
	var got wr.Completion
	for _, c := range rdmatest.WaitWC(t, s.cq, 2) {
		if c.Status != wr.Success {
			t.Fatalf("completion %+v: %v", c, c.Status)
		}
		if c.Opcode == wr.WCRecv {
			got = c
		}
	}
	return got
}

// TestDeviceTwoProcesses connects a QP in this process with one in a child
// process: each writes into the other's memory and notifies it.
func TestDeviceTwoProcesses(t *testing.T) {
	testenv.RequireDevice(t)
	me := newSide(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTwoProcessesChild$")
	cmd.Env = append(os.Environ(), "RDMAGO_TWO_PROCESS_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out := bufio.NewReader(stdout)
	peer := readHello(t, out)
	io.WriteString(stdin, me.hello())
	me.connect(t, peer)
	if _, err := me.qp.PostRecv([]wr.RecvWR{{ID: 10}}); err != nil {
		t.Fatal(err)
	}
	if line, _ := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("child said %q", line)
	}
	c := me.exchange(t, peer, "from the parent", 1)
	if c.Imm != 2 {
		t.Errorf("child's notification carried %d, want 2", c.Imm)
	}
	if got := string(me.buf.Bytes()[:14]); got != "from the child" {
		t.Errorf("child wrote %q into our memory", got)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, rest, stderr.String())
	}
}

// TestHelperTwoProcessesChild is the child of TestDeviceTwoProcesses; it
// does nothing unless run as that child.
func TestHelperTwoProcessesChild(t *testing.T) {
	if os.Getenv("RDMAGO_TWO_PROCESS_CHILD") != "1" {
		return
	}
	me := newSide(t)
	fmt.Print(me.hello())
	in := bufio.NewReader(os.Stdin)
	peer := readHello(t, in)
	me.connect(t, peer)
	if _, err := me.qp.PostRecv([]wr.RecvWR{{ID: 20}}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	// Wait for the parent's notification before touching its memory.
	c := rdmatest.WaitWC(t, me.cq, 1)[0]
	if c.Status != wr.Success || c.Imm != 1 {
		t.Fatalf("parent's notification: %+v", c)
	}
	if got := string(me.buf.Bytes()[:15]); got != "from the parent" {
		t.Fatalf("parent wrote %q into our memory", got)
	}
	copy(me.buf.Bytes()[2048:], "from the child")
	if _, err := me.qp.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{me.buf.SGE(2048, 14)}, Remote: wr.Remote{Addr: peer.addr, RKey: peer.rkey}},
		{ID: 2, Opcode: wr.OpSendWithImm, Imm: 2, Flags: wr.Signaled},
	}); err != nil {
		t.Fatal(err)
	}
	if c := rdmatest.WaitWC(t, me.cq, 1)[0]; c.Status != wr.Success {
		t.Fatalf("notification to the parent: %+v", c)
	}
}
