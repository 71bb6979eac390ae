package main

import (
	"bytes"
	"io"
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
		{args: []string{"devinfo", "-h"}, status: 0, stdout: "  -v, --verbose ", noStderr: true},
		{args: []string{"devinfo", "--help"}, status: 0, stdout: "  -l, --list ", noStderr: true},
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

// Every command must answer -h on stdout with status 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for name, c := range commands {
		var o bytes.Buffer
		if st := c.Run([]string{"-h"}, &o, io.Discard); st != 0 || o.Len() == 0 {
			t.Errorf("%s -h: status %d, stdout %q", name, st, o.String())
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
