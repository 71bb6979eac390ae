package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
)

func runRdmago(args ...string) (stdout, stderr string, status int) {
	var o, e bytes.Buffer
	status = rdmago(args, &o, &e)
	return o.String(), e.String(), status
}

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		status     int
		stdout     string // substring
		stderr     string // substring
		noStdout   bool
		noStderr   bool
		exactStdio bool
	}{
		{args: nil, status: 2, stderr: "rdmago <command> [arguments]", noStdout: true},
		{args: []string{"help"}, status: 0, stdout: "\tdevinfo  ", noStderr: true},
		{args: []string{"-h"}, status: 0, stdout: "\tversion  ", noStderr: true},
		{args: []string{"--help"}, status: 0, stdout: "\thelp  ", noStderr: true},
		{args: []string{"bogus"}, status: 2, stderr: `unknown command "bogus"`, noStdout: true},
		{args: []string{"help", "bogus"}, status: 2, stderr: `unknown command "bogus"`, noStdout: true},
		{args: []string{"help", "devinfo"}, status: 0, stdout: "Usage: rdmago devinfo ", noStderr: true},
		// ibv_devinfo has no -h: its port refuses it as the C tool does.
		{args: []string{"devinfo", "-h"}, status: 255, stdout: "  -v, --verbose ", stderr: "rdmago devinfo: invalid option -- 'h'\n"},
		{args: []string{"devinfo", "--help"}, status: 255, stdout: "  -l, --list ", stderr: "rdmago devinfo: unrecognized option '--help'\n"},
		{args: []string{"doctor", "-h"}, status: 0, stdout: "usage: rdmago doctor", noStderr: true},
		{args: []string{"help", "help"}, status: 0, stdout: "The commands are:", noStderr: true},
		{args: []string{"version"}, status: 0, stdout: "rdmago ", noStderr: true},
		{args: []string{"--version"}, status: 0, stdout: "rdmago ", noStderr: true},
		{args: []string{"version", "-h"}, status: 0, stdout: "usage: rdmago version", noStderr: true},
		{args: []string{"version", "x"}, status: 2, stderr: "usage: rdmago version", noStdout: true},
	} {
		o, e, st := runRdmago(tc.args...)
		if st != tc.status || !strings.Contains(o, tc.stdout) || !strings.Contains(e, tc.stderr) ||
			(tc.noStdout && o != "") || (tc.noStderr && e != "") {
			t.Errorf("rdmago %q: status %d, stdout %q, stderr %q", tc.args, st, o, e)
		}
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	var b bytes.Buffer
	commands.WriteHelp(&b)
	for name, c := range commands {
		if !strings.Contains(b.String(), "\t"+name+" ") || !strings.Contains(b.String(), c.Summary) {
			t.Errorf("help does not list %s", name)
		}
		if c.Run == nil || c.Summary == "" {
			t.Errorf("command %s lacks Run or Summary", name)
		}
	}
}

// Every command has a usage for "rdmago help NAME". rdmago's own
// commands answer -h with it and status 0; the ports of C tools that have
// no -h (those with Usage) refuse it as the C tool does, with a message on
// stderr, the same usage on stdout and a status that is not 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for name, c := range commands {
		var o, e, h bytes.Buffer
		st := c.Run([]string{"-h"}, &o, &e)
		if c.Usage == nil {
			if st != 0 || o.Len() == 0 {
				t.Errorf("%s -h: status %d, stdout %q", name, st, o.String())
			}
			continue
		}
		c.Usage(&h)
		if st == 0 || h.Len() == 0 || o.String() != h.String() {
			t.Errorf("%s -h: status %d, stdout %q; usage %q", name, st, o.String(), h.String())
		}
		if name != "rping" && !strings.Contains(e.String(), "invalid option -- 'h'") {
			// rping's getopt is silent (opterr 0).
			t.Errorf("%s -h: stderr %q, want getopt's invalid option", name, e.String())
		}
		if ho, _, hst := runRdmago("help", name); hst != 0 || ho != h.String() {
			t.Errorf("rdmago help %s: status %d, stdout %q, want the usage", name, hst, ho)
		}
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	commands.Register(&command.Command{Name: "devinfo"})
}
