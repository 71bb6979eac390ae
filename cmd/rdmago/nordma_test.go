//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/testenv"
)

// TestNoRDMAHost runs every command on a host with no RDMA modules, as a
// first-time user would: each must end promptly with a non-zero status and
// a line saying what is missing, never a panic. The doctor lists the
// problems; every other command adds the front end's hint after what the
// tool it ports prints there.
func TestNoRDMAHost(t *testing.T) {
	testenv.RequireNoRDMA(t)
	// The arguments that make each command try RDMA (as a server where it
	// has both roles, so that nothing depends on a peer).
	args := map[string][]string{
		"mckey": {"-m", "239.1.1.1"},
		"rping": {"-s"},
		"rdma":  {"link"},
		"perf":  {"write_bw"},
	}
	for name := range commands {
		switch name {
		case "help", "version":
			continue
		}
		t.Run(name, func(t *testing.T) {
			argv := append([]string{name}, args[name]...)
			type result struct {
				stdout, stderr string
				status         int
			}
			done := make(chan result, 1)
			go func() {
				o, e, st := runRdmago(argv...)
				done <- result{o, e, st}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("rdmago %s did not end within 30 s on a host without RDMA", strings.Join(argv, " "))
			}
			out := r.stdout + r.stderr
			if r.status == 0 || strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Errorf("rdmago %s: status %d\n%s", strings.Join(argv, " "), r.status, out)
			}
			want := "rdmago: this host has no RDMA (no RDMA kernel modules are loaded); 'rdmago doctor' says what to fix\n"
			if name == "doctor" {
				want = "[problem]     module ib_core: not loaded"
			}
			if !strings.Contains(out, want) {
				t.Errorf("rdmago %s: status %d, no %q in\n%s", strings.Join(argv, " "), r.status, want, out)
			}
		})
	}
}
