package tooltest

// The device tests of rdmago's ports of librdmacm's examples (udaddy,
// ucmatose, mckey): a server and a client, either of them rdmago or the C
// program, or either alone where it must fail as the C program does.

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
)

// CMSide is one program of such a run.
type CMSide struct {
	Name string // "rdmago" or "C", in labels
	Tool string // rdmago's command, the C program's name
	Path string // the C program's path; "" for rdmago
}

// Argv is the command line that runs the side with args.
func (s CMSide) Argv(args ...string) []string {
	if s.Path == "" {
		return append([]string{"rdmago", s.Tool}, args...)
	}
	return append([]string{s.Path}, args...)
}

// CMPair is what the two processes of a run printed.
type CMPair struct {
	Srv, Cli             *Proc
	SrvStatus, CliStatus int
}

// RunCMPair runs a server with srvArgs, once it listens on port a client
// with cliArgs, and waits for both.
func RunCMPair(t *testing.T, port int, server, client CMSide, srvArgs, cliArgs []string) CMPair {
	t.Helper()
	testenv.RequireDevice(t)
	for _, s := range []CMSide{server, client} {
		if s.Path != "" {
			RequireCTool(t, s.Path)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), CMTimeout)
	defer cancel()
	srv := Start(t, ctx, server.Name+" server", server.Argv(srvArgs...))
	defer func() {
		cancel()
		srv.Wait()
	}()
	WaitCMListening(t, srv, port)
	cli := Start(t, ctx, client.Name+" client", client.Argv(cliArgs...))
	r := CMPair{Srv: srv, Cli: cli}
	r.CliStatus = cli.Wait()
	r.SrvStatus = srv.Wait()
	if ctx.Err() != nil {
		t.Errorf("timeout %v: %v", CMTimeout, ctx.Err())
	}
	LogOnFailure(t, srv, r.SrvStatus)
	LogOnFailure(t, cli, r.CliStatus)
	return r
}

// CheckProc compares a process's status and output with what is wanted,
// line by line.
func CheckProc(t *testing.T, p *Proc, status, wantStatus int, want []string, wantStderr string) {
	t.Helper()
	if got := Lines(p.Stdout.String()); status != wantStatus || !slices.Equal(got, want) || p.Stderr.String() != wantStderr {
		t.Errorf("%s: status %d, stdout %q, stderr %q; want %d, %q, %q", p.Label, status, got, p.Stderr.String(), wantStatus, want, wantStderr)
	}
}

// CheckLike compares both processes of r with those of the reference
// run ref.
func CheckLike(t *testing.T, r, ref CMPair) {
	t.Helper()
	CheckProc(t, r.Srv, r.SrvStatus, ref.SrvStatus, Lines(ref.Srv.Stdout.String()), ref.Srv.Stderr.String())
	CheckProc(t, r.Cli, r.CliStatus, ref.CliStatus, Lines(ref.Cli.Stdout.String()), ref.Cli.Stderr.String())
}

// CompareAlone runs the C program c and rdmago's g with args, each alone,
// and compares their statuses and output, the C program's path read as
// rdmago's command name. wantFail says the C program must fail (a test
// that expects a failure and gets a run is wrong).
func CompareAlone(t *testing.T, c, g CMSide, args []string, wantFail bool) {
	t.Helper()
	RequireCTool(t, c.Path)
	ctx, cancel := context.WithTimeout(context.Background(), CMTimeout)
	defer cancel()
	want := Start(t, ctx, "C", c.Argv(args...))
	wantStatus := want.Wait()
	got := Start(t, ctx, "rdmago", g.Argv(args...))
	gotStatus := got.Wait()
	norm := func(s string) string { return strings.ReplaceAll(s, c.Path, g.Tool) }
	t.Logf("%s %q: status %d, stdout %q, stderr %q", c.Tool, args, wantStatus, want.Stdout.String(), want.Stderr.String())
	if ctx.Err() != nil || (wantFail && wantStatus == 0) || gotStatus != wantStatus ||
		got.Stdout.String() != norm(want.Stdout.String()) || got.Stderr.String() != norm(want.Stderr.String()) {
		t.Errorf("rdmago %s %q: status %d, stdout %q, stderr %q; %s: status %d, stdout %q, stderr %q (%v)",
			g.Tool, args, gotStatus, got.Stdout.String(), got.Stderr.String(), c.Tool, wantStatus, want.Stdout.String(), want.Stderr.String(), ctx.Err())
	}
}
