//go:build linux

package main

// The cmtime part: librdmacm's cmtime client, -c 100, against cmtime's
// server and against `rdmago cmtime`'s, alternating, -reps times. The
// client's "connect" step is the time from its first connect to its last
// ESTABLISHED: the servers' work of accepting (the request event, a QP on
// two CQs of its own, the accept); "disconnect" is their work of tearing
// the connections down. The client is the same C program in both, and it
// spins (sched_yield) while it waits, so under the instruction-counting
// clock both figures count the server's instructions, the kernel's and
// the client's spinning alike.

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdma/internal/perftable"
)

const cmtimePort = 7471

// cmtimeRun runs a server (argv) and the C client against it, and
// returns the client's connect and disconnect totals (ms).
func cmtimeRun(server []string, conns int) (connect, disconnect float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	srv, err := startProc(ctx, server, nil, false)
	if err != nil {
		return 0, 0, err
	}
	defer srv.kill()
	for !perftable.CMListening(cmtimePort) {
		select {
		case <-srv.done:
			return 0, 0, fmt.Errorf("%s exited: %v\n%s", server[0], srv.err, srv.out())
		case <-time.After(20 * time.Millisecond):
		}
	}
	out, err := exec.CommandContext(ctx, "/usr/bin/cmtime", "-s", *ip, "-c", strconv.Itoa(conns)).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("cmtime client: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "event:") {
		return 0, 0, fmt.Errorf("cmtime client: a connection failed\n%s", out)
	}
	// Each server tears its connections down after the client's last
	// DISCONNECTED; let it finish before the next run.
	for n := cmIDs(); n > 1 && ctx.Err() == nil; n = cmIDs() {
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 4 {
			continue
		}
		v, perr := strconv.ParseFloat(f[0], 64)
		switch strings.TrimSpace(name) {
		case "connect":
			connect, err = v, perr
		case "disconnect":
			disconnect = v
		}
	}
	if connect == 0 || err != nil {
		return 0, 0, fmt.Errorf("cmtime client: no connect time (%v)\n%s", err, out)
	}
	return connect, disconnect, nil
}

// cmIDs counts the rdma_cm IDs on cmtime's port.
func cmIDs() int {
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), ":"+strconv.Itoa(cmtimePort)+" ")
}

func cmtimeTable() error {
	const conns = 100
	servers := []struct {
		name string
		argv []string
	}{
		{"cmtime (C)", []string{"/usr/bin/cmtime", "-b", *ip}},
		{"rdmago cmtime", []string{rdmago, "cmtime", "-b", *ip}},
	}
	conn := make([][]float64, len(servers))
	disc := make([][]float64, len(servers))
	for range *reps {
		for i, s := range servers {
			c, d, err := cmtimeRun(s.argv, conns)
			if err != nil {
				return err
			}
			conn[i] = append(conn[i], c)
			disc[i] = append(disc[i], d)
		}
	}
	fmt.Printf("\ncmtime: librdmacm's cmtime client -c %d against each server, kernel %s, %d runs of each, alternating; median (range), ms\n\n", conns, kernelRelease(), *reps)
	fmt.Println("| step | cmtime server (C) | rdmago cmtime server | rdmago / C |")
	fmt.Println("|---|---|---|---|")
	for _, r := range []struct {
		name string
		v    [][]float64
	}{{"connect (accept 100)", conn}, {"disconnect (tear down 100)", disc}} {
		fmt.Printf("| %s | %s | %s | %.3f |\n", r.name, spread(r.v[0]), spread(r.v[1]), median(r.v[1])/median(r.v[0]))
	}
	return nil
}
