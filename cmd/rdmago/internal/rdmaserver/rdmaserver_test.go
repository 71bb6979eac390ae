package rdmaserver

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/wr"
)

func TestServerClientOptions(t *testing.T) {
	usage := func(argv0 string) string {
		var b bytes.Buffer
		rsUsage(&b, argv0)
		return b.String()
	}
	for _, tc := range []struct {
		server         bool
		args           []string
		run            bool
		status         int
		stdout, stderr string
		want           rsOptions
	}{
		{server: true, run: true, want: rsOptions{server: true, addr: "0.0.0.0", port: "7471"}},
		{server: false, run: true, want: rsOptions{addr: "127.0.0.1", port: "7471"}},
		{server: false, args: []string{"-s", "10.0.2.15", "-p7000", "-v"}, run: true,
			want: rsOptions{addr: "10.0.2.15", port: "7000", verbose: true}},
		{server: true, args: []string{"-s10.0.5.1", "x", "-p", "1"}, run: true,
			want: rsOptions{server: true, addr: "10.0.5.1", port: "1"}},
		{server: true, args: []string{"-h"}, status: 1, stdout: usage("rdmago server"),
			stderr: "rdmago server: invalid option -- 'h'\n"}, // as rdma_server: it has no -h
		{server: false, args: []string{"-x"}, status: 1, stdout: usage("rdmago client"),
			stderr: "rdmago client: invalid option -- 'x'\n"},
		{server: true, args: []string{"-p"}, status: 1, stdout: usage("rdmago server"),
			stderr: "rdmago server: option requires an argument -- 'p'\n"},
	} {
		var o, e bytes.Buffer
		argv0 := "rdmago client"
		if tc.server {
			argv0 = "rdmago server"
		}
		opts, status, run := rsParse(argv0, tc.server, tc.args, &e, &o)
		if run != tc.run || status != tc.status || o.String() != tc.stdout || e.String() != tc.stderr || (run && opts != tc.want) {
			t.Errorf("%s %q: run %v status %d options %+v\nstdout %q\nstderr %q", argv0, tc.args, run, status, opts, o.String(), e.String())
		}
	}
	if got := usage("rdmago client"); got != "usage: rdmago client\n\t[-s server_address]\n\t[-p port_number]\n\t[-v]\t(rdmago only: print the message received)\n" {
		t.Errorf("usage %q", got)
	}
}

func TestRsService(t *testing.T) {
	for in, want := range map[string]string{
		"7471": "7471", "0": "0", "65535": "65535", "65536": "0", "99999": "34463", "007": "7",
		"99999999999999999999999": "65535", "": "", "http": "http", "12x": "12x", "-1": "-1",
	} {
		if got := rsService(in); got != want {
			t.Errorf("rsService(%q) = %q, want %q", in, got, want)
		}
	}
}

// The C programs do not look at a completion's status.
func TestCompErr(t *testing.T) {
	c := wr.Completion{Status: wr.WRFlushErr}
	if compErr(c.Err()) != nil {
		t.Error("a failed completion must count as success")
	}
	if compErr(unix.ENOTCONN) == nil || compErr(nil) != nil {
		t.Error("compErr")
	}
}
