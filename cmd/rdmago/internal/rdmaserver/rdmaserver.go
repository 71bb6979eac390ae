// Package rdmaserver is "rdmago server" and "rdmago client", as
// rdma-core's rdma_server and rdma_client, and "rdmago xserver" and
// "rdmago xclient", as rdma_xserver and rdma_xclient.
package rdmaserver

// "rdmago server" and "rdmago client": librdmacm's rdma_server and
// rdma_client examples (librdmacm/examples/rdma_server.c and rdma_client.c,
// v44.0) in Go, built on the same calls of package cm: rdma_getaddrinfo,
// rdma_create_ep, rdma_listen and rdma_get_request, rdma_reg_msgs,
// rdma_post_recv and rdma_post_send, rdma_get_recv_comp and
// rdma_get_send_comp. Either side may be the C program.
//
// The exchange: the client connects with a receive posted and sends 16
// bytes; the server, which posted its receive before accepting, waits for
// them and answers with 16 bytes; each side then disconnects. Both send
// inline when the QP allows 16 bytes of inline data, as the C programs do,
// and both send zeros, as theirs are static buffers nobody writes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/cmacommon"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// rsMsgSize is the size of the messages each way.
const rsMsgSize = 16

// rsRecvFill is what a receive buffer holds before the peer's message
// overwrites it, so that -v shows the message arrived (the C programs' is
// all zeros, like the message).
const rsRecvFill = 0xa5

// Commands are "rdmago server" and "rdmago client", and their XRC
// relatives "rdmago xserver" and "rdmago xclient" (xserver.go).
func Commands() []*command.Command {
	return append(xCommands(), []*command.Command{
		{
			Name:    "server",
			Summary: "answer one rdma_cm connection with a 16-byte message (as rdma_server)",
			Run: func(args []string, stdout, stderr io.Writer) int {
				return rsMain(context.Background(), true, args, stdout, stderr)
			},
			Usage: func(w io.Writer) { rsUsage(w, "rdmago server") },
		},
		{
			Name:    "client",
			Summary: "send a 16-byte message over rdma_cm and wait for the answer (as rdma_client)",
			Run: func(args []string, stdout, stderr io.Writer) int {
				return rsMain(context.Background(), false, args, stdout, stderr)
			},
			Usage: func(w io.Writer) { rsUsage(w, "rdmago client") },
		},
	}...)
}

// rsOptions are the options of rdma_server and rdma_client.
type rsOptions struct {
	server  bool
	addr    string // -s: the server's address (the listening one, or the one to connect to)
	port    string // -p
	verbose bool   // -v: rdmago's own, print the message received
	// tool is the C program's name where it is not rdma_server's or
	// rdma_client's (rdma_xserver, rdma_xclient); xrc is their -c x.
	tool string
	xrc  bool
}

func (o rsOptions) name() string {
	if o.tool != "" {
		return o.tool
	}
	if o.server {
		return "rdma_server"
	}
	return "rdma_client"
}

func rsUsage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n", argv0)
	fmt.Fprintf(w, "\t[-v]\t(rdmago only: print the message received)\n")
}

// rsParse parses args as the C programs' getopt("s:p:") loop does, with
// getopt's messages; it adds -v. It returns the options and, unless run is
// set, the exit status: 1 after a bad option (usage on stdout), -h
// among them, as in the C programs.
func rsParse(argv0 string, server bool, args []string, stderr, stdout io.Writer) (o rsOptions, status int, run bool) {
	o = rsOptions{server: server, addr: "127.0.0.1", port: "7471"}
	if server {
		o.addr = "0.0.0.0"
	}
	fs := getopt.NewFlagSet(argv0)
	fs.Var(getopt.FuncValue{SetFunc: func(v string) error { o.addr = v; return nil }}, "s", "")
	fs.Var(getopt.FuncValue{SetFunc: func(v string) error { o.port = v; return nil }}, "p", "")
	fs.Var(getopt.FuncValue{IsBool: true, SetFunc: func(v string) error {
		if v != "true" {
			return errors.New("no value allowed")
		}
		o.verbose = true
		return nil
	}}, "v", "")
	if _, err := getopt.Parse(fs, args); err != nil {
		io.WriteString(stderr, getopt.Message(argv0, args, err))
		rsUsage(stdout, argv0)
		return o, 1, false
	}
	return o, 0, true
}

// rsMain runs "rdmago server" or "rdmago client" and returns the C
// program's exit status: its run()'s value as a byte (0, -1 as 255, or a
// getaddrinfo error code).
func rsMain(ctx context.Context, server bool, args []string, stdout, stderr io.Writer) int {
	return rsRunMain(ctx, rsProgram{"rdmago server", "rdmago client", rsParse, (*rsRun).server, (*rsRun).client},
		server, args, stdout, stderr)
}

// rsProgram is a pair of programs rsRunMain runs: rdma_server and
// rdma_client, or rdma_xserver and rdma_xclient.
type rsProgram struct {
	serverName, clientName string
	parse                  func(argv0 string, server bool, args []string, stderr, stdout io.Writer) (rsOptions, int, bool)
	server, client         func(*rsRun, context.Context) int
}

// rsRunMain parses the side's options, then runs it between its start and
// end lines, and returns the C program's exit status: its value as a byte.
func rsRunMain(ctx context.Context, p rsProgram, server bool, args []string, stdout, stderr io.Writer) int {
	argv0, side := p.clientName, p.client
	if server {
		argv0, side = p.serverName, p.server
	}
	o, status, run := p.parse(argv0, server, args, stderr, stdout)
	if !run {
		return status
	}
	r := &rsRun{o: o, stdout: stdout, stderr: stderr}
	fmt.Fprintf(stdout, "%s: start\n", o.name())
	ret := side(r, ctx)
	fmt.Fprintf(stdout, "%s: end %d\n", o.name(), ret)
	return int(uint8(ret))
}

type rsRun struct {
	o              rsOptions
	stdout, stderr io.Writer
}

func (r *rsRun) perror(prefix string, err error) { io.WriteString(r.stderr, clib.Perror(prefix, err)) }

// rsQPAttr is the QP both programs ask for.
func rsQPAttr() uverbs.QPInitAttr {
	return uverbs.QPInitAttr{
		Caps:      qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: rsMsgSize},
		SignalAll: true,
	}
}

// getAddrInfo is rdma_getaddrinfo, returning its status as the C programs
// see it: 0, a getaddrinfo error code, or -1 (librdmacm finds no RDMA
// device) with gai_strerror's text for it.
func (r *rsRun) getAddrInfo(ctx context.Context, hints *cm.AddrInfo) (*cm.AddrInfo, int) {
	if devs, err := uverbs.Devices(); errors.Is(err, uverbs.ErrNoDevice) || (err == nil && len(devs) == 0) {
		fmt.Fprintf(r.stdout, "rdma_getaddrinfo: %s\n", "Bad value for ai_flags") // gai_strerror(-1)
		return nil, -1
	}
	res, err := cm.GetAddrInfoContext(ctx, r.o.addr, rsService(r.o.port), hints)
	if err != nil {
		code, msg := cmacommon.GAIError(err)
		fmt.Fprintf(r.stdout, "rdma_getaddrinfo: %s\n", msg)
		return nil, code
	}
	return res, 0
}

// rsService is the service as glibc's getaddrinfo reads a number, which
// rdma_getaddrinfo passes it to: strtoul in base 10, kept in an int and
// cut to 16 bits by htons, so "99999" is port 34463. Names pass unchanged.
func rsService(s string) string {
	if s == "" {
		return s
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return s
		}
		if v > (^uint64(0)-uint64(c-'0'))/10 {
			v = ^uint64(0) // strtoul saturates
			continue
		}
		v = v*10 + uint64(c-'0')
	}
	return strconv.Itoa(int(uint16(v)))
}

// inlineFlags is what both programs decide from the QP's inline size.
func (r *rsRun) inlineFlags(maxInline uint32) wr.SendFlags {
	if maxInline >= rsMsgSize {
		return wr.Inline
	}
	fmt.Fprintf(r.stdout, "%s: device doesn't support IBV_SEND_INLINE, using sge sends\n", r.o.name())
	return 0
}

// received prints, with -v, the message a receive brought.
func (r *rsRun) received(c wr.Completion, msg []byte) {
	if r.o.verbose {
		fmt.Fprintf(r.stdout, "%s: received %d bytes: %x\n", r.o.name(), c.ByteLen, msg)
	}
}

// send sends msg as both programs do (rdma_post_send, then
// rdma_get_send_comp); false when a call failed, which it printed.
func (r *rsRun) send(ctx context.Context, id *cm.ID, msg []byte, mr *uverbs.MR, flags wr.SendFlags) bool {
	if err := id.PostSend(0, msg, mr, flags); err != nil {
		r.perror("rdma_post_send", err)
		return false
	}
	if _, err := id.GetSendComp(ctx); compErr(err) != nil {
		r.perror("rdma_get_send_comp", err)
		return false
	}
	return true
}

// recv waits for the message posted into msg (rdma_get_recv_comp) and
// prints it with -v; false when the call failed, which it printed.
func (r *rsRun) recv(ctx context.Context, id *cm.ID, msg []byte) bool {
	wc, err := id.GetRecvComp(ctx)
	if err = compErr(err); err != nil {
		r.perror("rdma_get_recv_comp", err)
		return false
	}
	r.received(wc, msg)
	return true
}

// compErr is how the C programs judge rdma_get_*_comp: a completion, even
// a failed one, counts as success (they do not look at its status); only
// the call's own failure is an error.
func compErr(err error) error {
	var ce *wr.CompletionError
	if errors.As(err, &ce) {
		return nil
	}
	return err
}

// server is rdma_server's run().
func (r *rsRun) server(ctx context.Context) int {
	res, ret := r.getAddrInfo(ctx, &cm.AddrInfo{Flags: cm.AIPassive, PortSpace: cm.PSTCP})
	if ret != 0 {
		return ret
	}
	attr := rsQPAttr()
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
	_, init, err := id.QP().Query(qp.AttrCap)
	if err != nil {
		r.perror("ibv_query_qp", err)
		return -1
	}
	sendFlags := r.inlineFlags(init.Caps.MaxInlineData)
	recvMsg, sendMsg, sendMR, release, ok := r.setUpMsgs(id, sendFlags)
	if !ok {
		return -1
	}
	defer release()
	if err := id.Accept(ctx, nil); err != nil {
		r.perror("rdma_accept", err)
		return -1
	}
	defer id.Disconnect(ctx)
	if !r.recv(ctx, id, recvMsg) {
		return -1
	}
	if !r.send(ctx, id, sendMsg, sendMR, sendFlags) {
		return -1
	}
	return 0
}

// setUpMsgs makes the two messages rdma_server and rdma_client exchange,
// registers them as they do (the send message only when it does not go
// inline) and posts the receive. On failure it prints the failing call's
// error, releases what it made and returns ok false; otherwise release
// deregisters both.
func (r *rsRun) setUpMsgs(id *cm.ID, sendFlags wr.SendFlags) (recvMsg, sendMsg []byte, sendMR *uverbs.MR, release func(), ok bool) {
	recvMsg = make([]byte, rsMsgSize)
	sendMsg = make([]byte, rsMsgSize)
	for i := range recvMsg {
		recvMsg[i] = rsRecvFill
	}
	recvMR, err := id.RegMsgs(recvMsg)
	if err != nil {
		r.perror("rdma_reg_msgs for recv_msg", err)
		return nil, nil, nil, nil, false
	}
	release = func() {
		if sendMR != nil {
			cm.DeregMR(sendMR)
		}
		cm.DeregMR(recvMR)
	}
	if sendFlags&wr.Inline == 0 {
		if sendMR, err = id.RegMsgs(sendMsg); err != nil {
			r.perror("rdma_reg_msgs for send_msg", err)
			release()
			return nil, nil, nil, nil, false
		}
	}
	if err := id.PostRecv(0, recvMsg, recvMR); err != nil {
		r.perror("rdma_post_recv", err)
		release()
		return nil, nil, nil, nil, false
	}
	return recvMsg, sendMsg, sendMR, release, true
}

// client is rdma_client's run().
func (r *rsRun) client(ctx context.Context) int {
	res, ret := r.getAddrInfo(ctx, &cm.AddrInfo{PortSpace: cm.PSTCP})
	if ret != 0 {
		return ret
	}
	attr := rsQPAttr()
	id, err := cm.CreateEP(ctx, res, nil, &attr)
	// rdma_client looks at the granted inline size before it checks for
	// failure; rdma_create_ep leaves the asked-for caps on failure.
	maxInline := attr.Caps.MaxInlineData
	if err == nil {
		maxInline = id.QP().Caps().MaxInlineData
	}
	sendFlags := r.inlineFlags(maxInline)
	if err != nil {
		r.perror("rdma_create_ep", err)
		return -1
	}
	defer id.Close()
	recvMsg, sendMsg, sendMR, release, ok := r.setUpMsgs(id, sendFlags)
	if !ok {
		return -1
	}
	defer release()
	if err := id.Connect(ctx, nil); err != nil {
		r.perror("rdma_connect", err)
		return -1
	}
	defer id.Disconnect(ctx)
	if !r.send(ctx, id, sendMsg, sendMR, sendFlags) {
		return -1
	}
	if !r.recv(ctx, id, recvMsg) {
		return -1
	}
	return 0
}
