package rdmaserver

import (
	"bytes"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/qp"
)

// The usages, option errors and statuses below are rdma_xserver's and
// rdma_xclient's (rdmacm-utils 44.0) as run in the VM, with rdmago's
// program name and the server's -v.
func TestXServerClientOptions(t *testing.T) {
	usage := func(argv0 string, server bool) string {
		var b bytes.Buffer
		xUsage(&b, argv0, server)
		return b.String()
	}
	const srv, cli = "rdmago xserver", "rdmago xclient"
	srvDefault := rsOptions{server: true, port: "7471", tool: "rdma_xserver"}
	cliDefault := rsOptions{addr: "127.0.0.1", port: "7471", tool: "rdma_xclient"}
	with := func(o rsOptions, f func(*rsOptions)) rsOptions { f(&o); return o }
	for _, tc := range []struct {
		server         bool
		args           []string
		run            bool
		status         int
		stdout, stderr string
		want           rsOptions
	}{
		{server: true, run: true, want: srvDefault},
		{server: false, run: true, want: cliDefault},
		{server: true, args: []string{"-p", "7000", "-c", "x", "-v"}, run: true,
			want: with(srvDefault, func(o *rsOptions) { o.port, o.xrc, o.verbose = "7000", true, true })},
		{server: true, args: []string{"-cX", "extra", "-cr"}, run: true, want: srvDefault},
		{server: false, args: []string{"-s", "10.0.2.15", "-p", "123456789", "-c", "xyz"}, run: true,
			want: with(cliDefault, func(o *rsOptions) { o.addr, o.port, o.xrc = "10.0.2.15", "12345", true })},
		{server: false, args: []string{"-c", "RC"}, run: true, want: cliDefault},
		{server: true, args: []string{"-p", "123456789"}, run: true,
			want: with(srvDefault, func(o *rsOptions) { o.port = "123456789" })},
		// The C programs have no -h.
		{server: true, args: []string{"-h"}, status: 1, stdout: usage(srv, true), stderr: srv + ": invalid option -- 'h'\n"},
		{server: false, args: []string{"-h"}, status: 1, stdout: usage(cli, false), stderr: cli + ": invalid option -- 'h'\n"},
		{server: true, args: []string{"-c", "q"}, status: 1, stdout: usage(srv, true)},
		{server: false, args: []string{"-c", ""}, status: 1, stdout: usage(cli, false)},
		{server: false, args: []string{"-c", "q", "-x"}, status: 1, stdout: usage(cli, false)},
		{server: true, args: []string{"-x", "-c", "q"}, status: 1, stdout: usage(srv, true),
			stderr: "rdmago xserver: invalid option -- 'x'\n"},
		{server: true, args: []string{"-s", "1.2.3.4"}, status: 1, stdout: usage(srv, true),
			stderr: "rdmago xserver: invalid option -- 's'\n"},
		{server: false, args: []string{"-v"}, status: 1, stdout: usage(cli, false),
			stderr: "rdmago xclient: invalid option -- 'v'\n"},
		{server: false, args: []string{"-c"}, status: 1, stdout: usage(cli, false),
			stderr: "rdmago xclient: option requires an argument -- 'c'\n"},
		{server: true, args: []string{"-p"}, status: 1, stdout: usage(srv, true),
			stderr: "rdmago xserver: option requires an argument -- 'p'\n"},
	} {
		var o, e bytes.Buffer
		argv0 := cli
		if tc.server {
			argv0 = srv
		}
		opts, status, run := xParse(argv0, tc.server, tc.args, &e, &o)
		if run != tc.run || status != tc.status || o.String() != tc.stdout || e.String() != tc.stderr || (run && opts != tc.want) {
			t.Errorf("%s %q: run %v status %d options %+v\nstdout %q\nstderr %q", argv0, tc.args, run, status, opts, o.String(), e.String())
		}
	}
	if got, want := usage(cli, false), "usage: rdmago xclient\n\t[-s server]\n\t[-p port_number]\n\t[-c communication type]\n"+
		"\t    r - RC: reliable-connected (default)\n\t    x - XRC: extended-reliable-connected\n"; got != want {
		t.Errorf("client usage %q, want %q", got, want)
	}
	if got, want := usage(srv, true), "usage: rdmago xserver\n\t[-p port_number]\n\t[-c communication type]\n"+
		"\t    r - RC: reliable-connected (default)\n\t    x - XRC: extended-reliable-connected\n"+
		"\t[-v]\t(rdmago only: print the message received)\n"; got != want {
		t.Errorf("server usage %q, want %q", got, want)
	}
}

func TestXHints(t *testing.T) {
	for _, tc := range []struct {
		o    rsOptions
		want cm.AddrInfo
	}{
		{rsOptions{server: true}, cm.AddrInfo{Flags: cm.AIPassive, PortSpace: cm.PSTCP, QPType: qp.RC}},
		{rsOptions{}, cm.AddrInfo{PortSpace: cm.PSTCP, QPType: qp.RC}},
		{rsOptions{server: true, xrc: true}, cm.AddrInfo{Flags: cm.AIPassive, PortSpace: cm.PSIB, QPType: qp.XRCRecv}},
		{rsOptions{xrc: true}, cm.AddrInfo{PortSpace: cm.PSIB, QPType: qp.XRCSend}},
	} {
		if got := *tc.o.xHints(); got.Flags != tc.want.Flags || got.PortSpace != tc.want.PortSpace || got.QPType != tc.want.QPType {
			t.Errorf("%+v: hints %+v, want %+v", tc.o, got, tc.want)
		}
	}
}
