package rdmaserver

// "rdmago xserver" and "rdmago xclient": librdmacm's rdma_xserver and
// rdma_xclient examples (librdmacm/examples/rdma_xserver.c and
// rdma_xclient.c, v44.0), the XRC relatives of rdma_server and
// rdma_client, on the same calls of package cm.
//
// The exchange: the server posts one receive and accepts with 4 bytes of
// private data, the number of its SRQ in network byte order (zero over
// RC, where it has none); the client sends 16 bytes, inline, with the
// completion of every send asked for, and names that SRQ in its send over
// XRC. Neither answers: the server disconnects once the message arrived,
// the client once its send completed. -c r (the default) is an RC
// connection in the TCP port space; -c x an XRC one in the IB port space,
// the server's QP an XRC receive QP of librdmacm's (here cm's) per-device
// XRC domain with an XRC SRQ, the client's an XRC send QP. A device
// without XRC (rxe) refuses the client's QP in rdma_create_ep and the
// server's in rdma_get_request, with EOPNOTSUPP, in both programs.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// xCommands are "rdmago xserver" and "rdmago xclient".
func xCommands() []*command.Command {
	return []*command.Command{
		{
			Name:    "xserver",
			Summary: "receive one 16-byte message over an RC or XRC rdma_cm connection (as rdma_xserver)",
			Run: func(args []string, stdout, stderr io.Writer) int {
				return xMain(context.Background(), true, args, stdout, stderr)
			},
			Usage: func(w io.Writer) { xUsage(w, "rdmago xserver", true) },
		},
		{
			Name:    "xclient",
			Summary: "send one 16-byte message over an RC or XRC rdma_cm connection (as rdma_xclient)",
			Run: func(args []string, stdout, stderr io.Writer) int {
				return xMain(context.Background(), false, args, stdout, stderr)
			},
			Usage: func(w io.Writer) { xUsage(w, "rdmago xclient", false) },
		},
	}
}

func xUsage(w io.Writer, argv0 string, server bool) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	if !server {
		fmt.Fprintf(w, "\t[-s server]\n")
	}
	fmt.Fprintf(w, "\t[-p port_number]\n\t[-c communication type]\n")
	fmt.Fprintf(w, "\t    r - RC: reliable-connected (default)\n\t    x - XRC: extended-reliable-connected\n")
	if server {
		fmt.Fprintf(w, "\t[-v]\t(rdmago only: print the message received)\n")
	}
}

// xPortLen is the most of -p rdma_xclient keeps: it copies the option
// into a char[6] with strncpy(port, optarg, 5).
const xPortLen = 5

// xParse parses args as the C programs' getopt(3) loops do ("p:c:" for
// the server, "s:p:c:" for the client), with getopt's messages; the
// server adds -v. -c takes the first character of its value, in either
// case: r for RC, x for XRC; anything else, the empty value included,
// ends the loop with the usage and status 1, as a bad option does, and
// options after it are never read. -h is an invalid option, as in the C
// programs. It returns the options and, unless run is set, the exit
// status.
func xParse(argv0 string, server bool, args []string, stderr, stdout io.Writer) (o rsOptions, status int, run bool) {
	o = rsOptions{server: server, addr: "127.0.0.1", port: "7471", tool: "rdma_xclient"}
	optstring := "s:p:c:"
	if server {
		// rdma_getaddrinfo(NULL, port): the unspecified address.
		o.addr, o.tool, optstring = "", "rdma_xserver", "p:c:v"
	}
	badType := false
	msg, ok := getopt.Short(argv0, args, optstring, func(opt byte, arg string) {
		if badType {
			return
		}
		switch opt {
		case 's':
			o.addr = arg
		case 'p':
			if !server && len(arg) > xPortLen {
				arg = arg[:xPortLen]
			}
			o.port = arg
		case 'c':
			switch strings.ToLower(arg[:min(len(arg), 1)]) {
			case "r":
				o.xrc = false
			case "x":
				o.xrc = true
			default:
				badType = true
			}
		case 'v':
			o.verbose = true
		}
	})
	switch {
	case badType:
		xUsage(stdout, argv0, server)
		return o, 1, false
	case !ok:
		io.WriteString(stderr, msg)
		xUsage(stdout, argv0, server)
		return o, 1, false
	}
	return o, 0, true
}

// xMain runs "rdmago xserver" or "rdmago xclient" and returns the C
// program's exit status: its test()'s value as a byte (0, -1 as 255, or a
// getaddrinfo error code).
func xMain(ctx context.Context, server bool, args []string, stdout, stderr io.Writer) int {
	return rsRunMain(ctx, rsProgram{"rdmago xserver", "rdmago xclient", xParse, (*rsRun).xserver, (*rsRun).xclient},
		server, args, stdout, stderr)
}

// xHints are both programs' rdma_getaddrinfo hints: RC in the TCP port
// space, or XRC (the server's receive side, the client's send side) in
// the IB port space.
func (o rsOptions) xHints() *cm.AddrInfo {
	h := &cm.AddrInfo{PortSpace: cm.PSTCP, QPType: qp.RC}
	if o.xrc {
		h.PortSpace, h.QPType = cm.PSIB, qp.XRCSend
		if o.server {
			h.QPType = qp.XRCRecv
		}
	}
	if o.server {
		h.Flags = cm.AIPassive
	}
	return h
}

// xserver is rdma_xserver's test().
func (r *rsRun) xserver(ctx context.Context) int {
	res, ret := r.getAddrInfo(ctx, r.o.xHints())
	if ret != 0 {
		return ret
	}
	attr := uverbs.QPInitAttr{Caps: qp.Caps{MaxRecvWR: 1, MaxRecvSGE: 1}}
	if !r.o.xrc {
		attr.Caps.MaxSendWR, attr.Caps.MaxSendSGE = 1, 1
	}
	listen, err := cm.CreateEP(ctx, res, nil, &attr)
	if err != nil {
		r.perror("rdma_create_ep", err)
		return -1
	}
	defer listen.Close()
	if err := listen.Listen(0); err != nil {
		r.perror("rdma_listen", err)
		return -1
	}
	id, err := listen.GetRequest(ctx)
	if err != nil {
		r.perror("rdma_get_request", err)
		return -1
	}
	defer id.Close()
	var srqn [4]byte // network byte order; zero over RC
	if r.o.xrc {
		if err := id.CreateSRQ(nil, uverbs.SRQAttr{MaxWR: 1, MaxSGE: 1}); err != nil {
			r.perror("rdma_create_srq:", err)
			return -1
		}
		n, err := id.SRQ().Num()
		if err != nil {
			r.perror("ibv_get_srq_num", err)
			return -1
		}
		binary.BigEndian.PutUint32(srqn[:], n)
	}
	msg := make([]byte, rsMsgSize)
	for i := range msg {
		msg[i] = rsRecvFill
	}
	mr, err := id.RegMsgs(msg)
	if err != nil {
		// rdma_xserver returns the last call's status, a success.
		r.perror("rdma_reg_msgs", err)
		return 0
	}
	defer cm.DeregMR(mr)
	if err := id.PostRecv(0, msg, mr); err != nil {
		r.perror("rdma_post_recv", err)
		return -1
	}
	if err := id.Accept(ctx, &cm.ConnParam{PrivateData: srqn[:]}); err != nil {
		r.perror("rdma_accept", err)
		return -1
	}
	defer id.Disconnect(ctx)
	if !r.recv(ctx, id, msg) {
		return -1
	}
	return 0
}

// xclient is rdma_xclient's test().
func (r *rsRun) xclient(ctx context.Context) int {
	res, ret := r.getAddrInfo(ctx, r.o.xHints())
	if ret != 0 {
		return ret
	}
	attr := uverbs.QPInitAttr{Caps: qp.Caps{MaxSendWR: 1, MaxSendSGE: 1}, SignalAll: true}
	if !r.o.xrc {
		attr.Caps.MaxRecvWR, attr.Caps.MaxRecvSGE = 1, 1
	}
	id, err := cm.CreateEP(ctx, res, nil, &attr)
	if err != nil {
		r.perror("rdma_create_ep", err)
		return -1
	}
	defer id.Close()
	msg := make([]byte, rsMsgSize)
	mr, err := id.RegMsgs(msg)
	if err != nil {
		r.perror("rdma_reg_msgs", err)
		return 0 // as rdma_xclient: the last call's status
	}
	defer cm.DeregMR(mr)
	if err := id.Connect(ctx, nil); err != nil {
		r.perror("rdma_connect", err)
		return -1
	}
	defer id.Disconnect(ctx)
	var srqn uint32
	if r.o.xrc {
		if ev := id.Event(); ev != nil && len(ev.PrivateData()) >= 4 {
			srqn = binary.BigEndian.Uint32(ev.PrivateData())
		}
	}
	// rdma_xclient posts with ibv_post_send itself: inline, with an lkey
	// of 0, which inline data never uses.
	sgl := [1]wr.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&msg[0]))), Length: rsMsgSize}}
	_, err = id.QP().PostSend([]wr.SendWR{{Opcode: wr.OpSend, Flags: wr.Inline, SGList: sgl[:], RemoteSRQN: srqn}})
	runtime.KeepAlive(msg)
	if err != nil {
		r.perror("rdma_post_send", err)
		r.perror("post_send", err)
		return int(errnoOf(err))
	}
	if _, err := id.GetSendComp(ctx); compErr(err) != nil {
		r.perror("rdma_get_recv_comp", err) // sic: rdma_xclient's message
		return -1
	}
	return 0
}

// errnoOf is the errno ibv_post_send returns for err, as rdma_xclient
// returns it; -1 when err carries none.
func errnoOf(err error) int {
	var en unix.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	return -1
}
