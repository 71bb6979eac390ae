//go:build linux

package main

// The cmtime part: librdmacm's cmtime client, -c 100, against cmtime's
// server and against `rdmago cmtime`'s, alternating, -reps times. The
// client's "connect" step is the time from its first connect to its last
// ESTABLISHED: the servers' work of accepting (the request event, a QP on
// the CQ the server's QPs share, the moves to RTR and RTS, the accept);
// "disconnect" is their work of tearing the connections down. The client
// is the same C program in both, and it spins (sched_yield) while it
// waits, so under the instruction-counting clock both figures count the
// server's instructions, the kernel's and the client's spinning alike.
//
// Each pair runs twice: with the client at normal priority, and under
// nice 19. On the one CPU, CFS gives the spinning client about as much
// time as the busiest server thread it competes with, so at normal
// priority a server's figure grows with the CPU time of its busiest
// thread, and a server that spreads the same work over more threads (C
// cmtime's three) comes out faster. Under nice 19 the client yields the
// CPU to every runnable server and kernel thread, and the figures count
// the servers' and the kernel's work. The servers' own CPU time, after
// their start, is measured too (/proc/PID/task/*/schedstat).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdma/internal/perftable"
)

const cmtimePort = 7471

// cmtimeRun runs a server (argv) and the C client against it, niced when
// nice, and returns the client's connect and disconnect totals and the
// server's CPU time over the run (ms).
func cmtimeRun(server []string, conns int, nice bool) (connect, disconnect, cpu float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	srv, err := startProc(ctx, server, nil, false)
	if err != nil {
		return 0, 0, 0, err
	}
	defer srv.kill()
	for !perftable.CMListening(cmtimePort) {
		select {
		case <-srv.done:
			return 0, 0, 0, fmt.Errorf("%s exited: %v\n%s", server[0], srv.err, srv.out())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cpu0, err := procCPU(srv.cmd.Process.Pid)
	if err != nil {
		return 0, 0, 0, err
	}
	argv := []string{"/usr/bin/cmtime", "-s", *ip, "-c", strconv.Itoa(conns)}
	if nice {
		argv = append([]string{"nice", "-n", "19"}, argv...)
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("cmtime client: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "event:") {
		return 0, 0, 0, fmt.Errorf("cmtime client: a connection failed\n%s", out)
	}
	// Each server tears its connections down after the client's last
	// DISCONNECTED; let it finish before the next run.
	for n := cmIDs(); n > 1 && ctx.Err() == nil; n = cmIDs() {
		time.Sleep(20 * time.Millisecond)
	}
	cpu1, err := procCPU(srv.cmd.Process.Pid)
	if err != nil {
		return 0, 0, 0, err
	}
	cpu = float64(cpu1-cpu0) / 1e6
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
		return 0, 0, 0, fmt.Errorf("cmtime client: no connect time (%v)\n%s", err, out)
	}
	return connect, disconnect, cpu, nil
}

// procCPU is the CPU time of process pid's threads so far (ns), from the
// scheduler's run time, which counts every instruction under icount.
// Threads that have exited are not counted: neither server ends one.
func procCPU(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of process %d: %v", pid, err)
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s: %q", t, b)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		ns += v
	}
	return ns, nil
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
	for _, nice := range []bool{false, true} {
		conn := make([][]float64, len(servers))
		disc := make([][]float64, len(servers))
		cpu := make([][]float64, len(servers))
		for range *reps {
			for i, s := range servers {
				c, d, u, err := cmtimeRun(s.argv, conns, nice)
				if err != nil {
					return err
				}
				conn[i] = append(conn[i], c)
				disc[i] = append(disc[i], d)
				cpu[i] = append(cpu[i], u)
			}
		}
		client := "at normal priority"
		if nice {
			client = "under nice 19"
		}
		fmt.Printf("\ncmtime: librdmacm's cmtime client -c %d %s against each server, kernel %s, %d runs of each, alternating; median (range), ms\n\n", conns, client, kernelRelease(), *reps)
		fmt.Println("| step | cmtime server (C) | rdmago cmtime server | rdmago / C |")
		fmt.Println("|---|---|---|---|")
		for _, r := range []struct {
			name string
			v    [][]float64
		}{{"connect (accept 100)", conn}, {"disconnect (tear down 100)", disc}, {"server CPU time, both steps", cpu}} {
			fmt.Printf("| %s | %s | %s | %.3f |\n", r.name, spread(r.v[0]), spread(r.v[1]), median(r.v[1])/median(r.v[0]))
		}
	}
	return nil
}
