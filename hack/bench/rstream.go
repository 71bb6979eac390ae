//go:build linux

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdma/internal/perftable"
)

// The rstream part: `rdmago rstream` (package rsocket) against librdmacm's
// rstream (the C rsockets), each against itself, for the three
// transfer sizes in rstream's two shapes: a stream of transfers one way and
// then the other (its Gb/sec), and one transfer each way per iteration (its
// usec/xfer, half a round trip). The same programs with -T s, over TCP on
// the same link, are the reference a user would compare with.
//
// Every program runs in rstream's blocking mode (-T b): its default spins
// on non-blocking calls, which on the one vCPU of an instruction-counting
// VM holds the CPU its peer needs until the scheduler's tick (4 ms a
// transfer). rdmago rstream blocks in the Go runtime in every mode.

type rsRow struct {
	name string
	args []string
	lat  bool // µs per transfer, lower is better; else MB/s
}

var rstreamRows = []rsRow{
	{"64 B stream", []string{"-S", "64", "-C", "10000"}, false},
	{"4 KiB stream", []string{"-S", "4096", "-C", "2000"}, false},
	{"64 KiB stream", []string{"-S", "65536", "-C", "500"}, false},
	{"64 B round trip", []string{"-S", "64", "-C", "1", "-I", "2000"}, true},
	{"4 KiB round trip", []string{"-S", "4096", "-C", "1", "-I", "1000"}, true},
	{"64 KiB round trip", []string{"-S", "65536", "-C", "1", "-I", "200"}, true},
}

type rsTool struct {
	name string
	argv []string
	tcp  bool
}

func rsTools() []rsTool {
	t := []rsTool{
		{"rstream (C)", []string{"/usr/bin/rstream", "-T", "b"}, false},
		{"rdmago rstream", []string{rdmago, "rstream", "-T", "b"}, false},
	}
	if *rsTCP {
		t = append(t,
			rsTool{"rstream -T s (C, TCP)", []string{"/usr/bin/rstream", "-T", "s", "-T", "b"}, true},
			rsTool{"rdmago rstream -T s (TCP)", []string{rdmago, "rstream", "-T", "s", "-T", "b"}, true})
	}
	return t
}

// cpu is the CPU time both processes of a run took per transfer, in
// user space and in the kernel, as the kernel accounted it (in ticks: over
// a run of a second or more, to a few percent).
type cpu struct{ user, sys float64 }

// runRstream runs one server and client of t and returns the client's
// figure and what the pair cost in CPU.
func runRstream(t rsTool, rw rsRow) (float64, cpu, error) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	port := nextPort
	nextPort++
	args := append(append([]string(nil), rw.args...), "-p", strconv.Itoa(port))
	srv, err := startProc(ctx, append(append([]string(nil), t.argv...), args...), nil, false)
	if err != nil {
		return 0, cpu{}, err
	}
	for !listening(port, t.tcp) {
		select {
		case <-srv.done:
			return 0, cpu{}, fmt.Errorf("%s server exited before listening: %v\n%s", t.name, srv.err, srv.out())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cli, err := startProc(ctx, append(append(append([]string(nil), t.argv...), args...), "-s", *ip), nil, false)
	if err != nil {
		srv.kill()
		return 0, cpu{}, err
	}
	<-cli.done
	select {
	case <-srv.done:
	case <-time.After(time.Minute):
		srv.kill()
		return 0, cpu{}, fmt.Errorf("%s server did not exit after its client:\n%s", t.name, srv.out())
	}
	for _, p := range []*proc{cli, srv} {
		if p.err != nil {
			return 0, cpu{}, fmt.Errorf("%s %q: %v\n%s", t.name, rw.args, p.err, p.out())
		}
	}
	// name bytes xfers iters total time Gb/sec usec/xfer: usec/xfer has
	// the precision (Gb/sec is printed to 0.01), so throughput is the
	// transfer's size over it.
	for _, line := range strings.Split(cli.stdout.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 8 && f[0] == "custom" {
			us, err := strconv.ParseFloat(f[7], 64)
			if err != nil || us <= 0 {
				return 0, cpu{}, fmt.Errorf("%s %q: usec/xfer %q", t.name, rw.args, f[7])
			}
			c := usage(rw, cli, srv)
			if rw.lat {
				return us, c, nil
			}
			size, _ := strconv.ParseFloat(rw.args[1], 64)
			return size / us, c, nil // bytes per µs: MB/s
		}
	}
	return 0, cpu{}, fmt.Errorf("%s %q printed no results row:\n%s", t.name, rw.args, cli.out())
}

// usage is the CPU time of cli and srv per transfer of rw, in µs.
func usage(rw rsRow, cli, srv *proc) cpu {
	n := 2.0
	for i := 0; i+1 < len(rw.args); i += 2 {
		if rw.args[i] == "-C" || rw.args[i] == "-I" {
			v, _ := strconv.ParseFloat(rw.args[i+1], 64)
			n *= v
		}
	}
	var c cpu
	for _, p := range []*proc{cli, srv} {
		ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			continue
		}
		c.user += float64(time.Duration(ru.Utime.Nano()).Microseconds())
		c.sys += float64(time.Duration(ru.Stime.Nano()).Microseconds())
	}
	c.user /= n
	c.sys /= n
	return c
}

// listening tells that the server listens: on TCP, or through rdma_cm.
func listening(port int, tcp bool) bool {
	if tcp {
		return perftable.Listening(port)
	}
	return perftable.CMListening(port)
}

// rstreamTable measures every row for every tool, alternating, reps times,
// and prints each one's median and range and rdmago's ratio to C's.
func rstreamTable() error {
	tools := rsTools()
	var cpuNotes []string
	fmt.Printf("\nrstream: kernel %s, %d runs of each, alternating; median (range)\n\n", kernelRelease(), *reps)
	head, rule := "| transfer | rstream args | unit |", "|---|---|---|"
	for _, t := range tools {
		head += " " + t.name + " |"
		rule += "---|"
	}
	fmt.Println(head + " rdmago / C | target |")
	fmt.Println(rule + "---|---|")
	for _, rw := range rstreamRows {
		if !rowRE.MatchString("rstream " + rw.name) {
			continue
		}
		vals := make([][]float64, len(tools))
		cpus := make([][]cpu, len(tools))
		for range *reps {
			for i, t := range tools {
				v, c, err := runRstream(t, rw)
				if err != nil {
					return err
				}
				vals[i] = append(vals[i], v)
				cpus[i] = append(cpus[i], c)
			}
		}
		for i, t := range tools {
			var u, k []float64
			for _, c := range cpus[i] {
				u, k = append(u, c.user), append(k, c.sys)
			}
			cpuNotes = append(cpuNotes, fmt.Sprintf("| %s | %s | %.2f | %.2f |", rw.name, t.name, median(u), median(k)))
		}
		unit, target := "MB/s", "≥ 1.00"
		if rw.lat {
			unit, target = "µs/transfer", "≤ 1.00"
		}
		line := fmt.Sprintf("| %s | `%s` | %s |", rw.name, strings.Join(rw.args, " "), unit)
		for _, v := range vals {
			line += " " + spread(v) + " |"
		}
		fmt.Printf("%s %.3f | %s |\n", line, median(vals[1])/median(vals[0]), target)
	}
	fmt.Printf("\nrstream: CPU time of both processes per transfer (µs, median), user space and kernel\n\n")
	fmt.Println("| transfer | program | user | kernel |")
	fmt.Println("|---|---|---|---|")
	for _, l := range cpuNotes {
		fmt.Println(l)
	}
	return nil
}
