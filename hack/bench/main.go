//go:build linux

// Command bench runs rdma-core's perftest programs and `rdmago perf` side by
// side on one RDMA device and prints their figures and ratios. `make bench`
// runs it inside the soft-RoCE VM; it works the same on a host with a real
// device.
//
//	bench [-d rxe0] [-reps 3] [-ip 10.0.2.15] rdmago-binary table|latency|scale|rstream|cmtime|valkey...
//
// table: the rows of docs/performance.md, each pair (perftest against
// perftest, rdmago against rdmago) alternating -reps times. Meant for a VM
// under QEMU's instruction-counting clock, where a figure repeats to about
// 0.1%.
//
// latency: polling latency (no -e), for a wall-clock boot with two vCPUs
// (on one vCPU a polling latency test measures the scheduler's tick); it
// reports the median and the spread of the runs.
//
// scale: -q 1, 100 and 1000 QPs: the run's time, peak memory (maxrss),
// mappings and descriptors, for each program.
//
// rstream: `rdmago rstream` against librdmacm's rstream, and both over TCP
// (-T s) for reference, for 64 B, 4 KiB and 64 KiB transfers.
//
// cmtime: librdmacm's cmtime client connecting 100 connections to
// cmtime's server and to `rdmago cmtime`'s, with the client at normal
// priority and under nice 19, and the servers' CPU time.
//
// valkey: SET and GET against valkey-server over its RDMA transport and
// over TCP, and the Go client beside valkey's C RDMA client (-valkey names
// their directory; valkey.go says how each is timed).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdma/internal/perftable"
)

// nextPort is the TCP port of the next pair: each run takes a new one, so
// no run waits on an earlier one's sockets.
var nextPort = 18515

var (
	device  = flag.String("d", "rxe0", "RDMA device")
	gidIdx  = flag.String("x", "1", "GID index")
	reps    = flag.Int("reps", 3, "repetitions of each pair")
	ip      = flag.String("ip", "10.0.2.15", "address the client connects to")
	timeout = flag.Duration("timeout", 10*time.Minute, "limit for one run")
	rsTCP   = flag.Bool("tcp", true, "with rstream: measure both programs over TCP too")
	rowRE   = regexp.MustCompile("")
	rdmago  string
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: bench [flags] rdmago-binary table|latency|scale|rstream|cmtime|valkey...")
		flag.PrintDefaults()
	}
	run := flag.String("run", "", "measure only the rows whose names match this regular expression")
	flag.BoolVar(&cpuSplitOn, "cpusplit", false, "with valkey: print where the CPU time of each one-thread rdma-test step goes (valkey.go)")
	flag.StringVar(&valkeyDir, "valkey", "", "`directory` of valkey-server and rdma-test, for the valkey part")
	flag.Parse()
	rowRE = regexp.MustCompile(*run)
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if rdmago, err = filepath.Abs(flag.Arg(0)); err != nil {
		fatal(err)
	}
	for _, what := range flag.Args()[1:] {
		switch what {
		case "table":
			err = table()
		case "latency":
			err = latency()
		case "scale":
			err = scale()
		case "rstream":
			err = rstreamTable()
		case "cmtime":
			err = cmtimeTable()
		case "valkey":
			err = valkeyTable()
		default:
			err = fmt.Errorf("unknown part %q", what)
		}
		if err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// figure says which column of a results row a line of the table reports.
type figure int

const (
	msgRate   figure = iota // Mpps, bandwidth tests' last column
	bandwidth               // BW average [MB/sec]
	typical                 // t_typical [usec], latency tests
)

func (f figure) String() string {
	return [...]string{"Mpps", "MB/s", "µs typical"}[f]
}

// higherIsBetter says which way the ratio's target points.
func (f figure) higherIsBetter() bool { return f != typical }

type row struct {
	name string
	test string // perftest's program without "ib_"
	args []string
	fig  figure
}

var tableRows = []row{
	{"write 64 B", "write_bw", []string{"-s", "64", "-n", "5000"}, msgRate},
	{"write 64 B, post list 16", "write_bw", []string{"-s", "64", "-n", "5008", "-l", "16"}, msgRate},
	{"send 64 B", "send_bw", []string{"-s", "64", "-n", "5000"}, msgRate},
	{"send 64 B, post list 16", "send_bw", []string{"-s", "64", "-n", "5008", "-l", "16"}, msgRate},
	{"write 64 KiB", "write_bw", []string{"-s", "65536", "-n", "1000"}, bandwidth},
	{"read 64 KiB", "read_bw", []string{"-s", "65536", "-n", "1000"}, bandwidth},
	{"UD send 1 KiB", "send_bw", []string{"-c", "UD", "-s", "1024", "-n", "5000"}, msgRate},
	{"atomic (fetch-and-add)", "atomic_bw", []string{"-n", "5000"}, msgRate},
	{"send latency 8 B, -e", "send_lat", []string{"-s", "8", "-n", "1000", "-e"}, typical},
	{"read latency 8 B, -e", "read_lat", []string{"-s", "8", "-n", "1000", "-e"}, typical},
}

var latencyRows = []row{
	{"send latency 8 B, polling", "send_lat", []string{"-s", "8", "-n", "5000"}, typical},
	{"read latency 8 B, polling", "read_lat", []string{"-s", "8", "-n", "5000"}, typical},
	{"write latency 8 B, polling", "write_lat", []string{"-s", "8", "-n", "5000"}, typical},
}

// tool is one of the implementations, with its environment.
type tool struct {
	name string
	argv func(test string) []string
	env  []string
}

var (
	perftest = tool{name: "rdma-core (perftest)", argv: func(test string) []string { return []string{"/usr/bin/ib_" + test} }}
	rdmagoT  = tool{name: "rdmago", argv: func(test string) []string { return []string{rdmago, "perf", test} }}
	// rdmagoNoPreempt is rdmago without the runtime's asynchronous
	// preemption: the signal sysmon sends a goroutine that has run for
	// 10 ms, which a busy-polling loop always has.
	rdmagoNoPreempt = tool{name: "rdmago, GODEBUG=asyncpreemptoff=1", argv: rdmagoT.argv, env: []string{"GODEBUG=asyncpreemptoff=1"}}
	tools           = []tool{perftest, rdmagoT}
)

// result is one run of a pair.
type result struct {
	row        []string // the client's last results row
	srv, cli   *proc
	virtualDur time.Duration // the pair's run, by the guest's clock
}

// runPair runs one server and one client of tool t with args. With
// sample, it watches each process's mappings, descriptors and peak memory;
// only the scale part does: on one vCPU the sampler's work would come out
// of the measured programs' time.
func runPair(t tool, test string, args []string, sample bool) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	port := nextPort
	nextPort++
	common := append([]string{"-d", *device, "-x", *gidIdx, "-F", "-p", strconv.Itoa(port)}, args...)
	start := time.Now()
	srv, err := startProc(ctx, append(t.argv(test), common...), t.env, sample)
	if err != nil {
		return nil, err
	}
	for !perftable.Listening(port) {
		select {
		case <-srv.done:
			return nil, fmt.Errorf("%s server exited before listening: %v\n%s", t.name, srv.err, srv.out())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cli, err := startProc(ctx, append(append(t.argv(test), common...), *ip), t.env, sample)
	if err != nil {
		srv.kill()
		return nil, err
	}
	<-cli.done
	select {
	case <-srv.done:
	case <-time.After(time.Minute):
		srv.kill()
		return nil, fmt.Errorf("%s %s server did not exit after its client:\n%s", t.name, test, srv.out())
	}
	res := &result{srv: srv, cli: cli, virtualDur: time.Since(start)}
	for _, p := range []*proc{cli, srv} {
		if p.err != nil {
			return nil, fmt.Errorf("%s %s %q: %v\n%s", t.name, test, args, p.err, p.out())
		}
	}
	rows := perftable.Rows(cli.stdout.String())
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s %s %q printed no results row:\n%s", t.name, test, args, cli.out())
	}
	res.row = rows[len(rows)-1]
	return res, nil
}

func (r *result) value(f figure) (float64, error) {
	col := map[figure]int{msgRate: 4, bandwidth: 3, typical: 4}[f]
	if col >= len(r.row) {
		return 0, fmt.Errorf("row %q has no column %d", r.row, col)
	}
	return strconv.ParseFloat(r.row[col], 64)
}

// measure runs row rw for every tool, alternating, reps times, and
// returns each tool's figures.
func measure(rw row, n int, tools []tool) ([][]float64, error) {
	vals := make([][]float64, len(tools))
	for i := 0; i < n; i++ {
		for ti, t := range tools {
			res, err := runPair(t, rw.test, rw.args, false)
			if err != nil {
				return nil, err
			}
			v, err := res.value(rw.fig)
			if err != nil {
				return nil, err
			}
			vals[ti] = append(vals[ti], v)
		}
	}
	return vals, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread prints the median and, when the runs differ, their range.
func spread(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	m := median(v)
	if lo == hi {
		return fmtNum(m)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(m), fmtNum(lo), fmtNum(hi))
}

func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
}

func kernelRelease() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "?"
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// printRows measures rows with tools (rdma-core's first) and prints a
// table: each tool's median and range, and each other tool's ratio to
// rdma-core's median.
func printRows(title string, rows []row, n int, tools []tool) error {
	fmt.Printf("\n%s: kernel %s, device %s, %d runs of each, alternating; median (range)\n\n", title, kernelRelease(), *device, n)
	head, rule := "| test | perftest args | unit |", "|---|---|---|"
	for _, t := range tools {
		head += " " + t.name + " |"
		rule += "---|"
	}
	for _, t := range tools[1:] {
		head += " " + t.name + " / rdma-core |"
		rule += "---|"
	}
	fmt.Println(head + " target |")
	fmt.Println(rule + "---|")
	for _, rw := range rows {
		if !rowRE.MatchString(rw.name) {
			continue
		}
		vals, err := measure(rw, n, tools)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("| %s | `ib_%s %s` | %s |", rw.name, rw.test, strings.Join(rw.args, " "), rw.fig)
		for _, v := range vals {
			line += " " + spread(v) + " |"
		}
		for _, v := range vals[1:] {
			line += fmt.Sprintf(" %.3f |", median(v)/median(vals[0]))
		}
		target := "≥ 1.00"
		if !rw.fig.higherIsBetter() {
			target = "≤ 1.00"
		}
		fmt.Println(line + " " + target + " |")
	}
	return nil
}

func table() error { return printRows("side by side", tableRows, *reps, tools) }

// latency adds rdmago without asynchronous preemption: a polling loop is
// the goroutine sysmon preempts every 10 ms.
func latency() error {
	return printRows("polling latency", latencyRows, max(*reps, 5), []tool{perftest, rdmagoT, rdmagoNoPreempt})
}

// scale runs write_bw with 1, 100 and 1000 QPs and reports what each
// side costs: the whole run's time (setup and teardown dominate at a few
// iterations per QP), the median of -reps runs; and, from one more run
// sampled every millisecond (the sampler's own work would lengthen the
// timed runs), the server's peak resident memory (VmHWM) and the most
// mappings and descriptors it held.
func scale() error {
	fmt.Printf("\nscale: write_bw -s 64 -n 10 -q N, kernel %s; server process; run time the median of %d runs\n\n", kernelRelease(), *reps)
	fmt.Println("| QPs | program | run time | per added QP | peak RSS | per added QP | mappings | descriptors |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	type point struct{ dur, rss float64 }
	base := map[string]point{}
	for _, q := range []int{1, 100, 1000} {
		args := []string{"-s", "64", "-n", "10", "-q", strconv.Itoa(q)}
		for _, t := range tools {
			var durs []float64
			for range *reps {
				res, err := runPair(t, "write_bw", args, false)
				if err != nil {
					return err
				}
				durs = append(durs, float64(res.virtualDur))
			}
			res, err := runPair(t, "write_bw", args, true)
			if err != nil {
				return err
			}
			pt := point{median(durs), float64(res.srv.maxHWM)}
			perQPTime, perQPMem := "", ""
			if b, ok := base[t.name]; ok {
				perQPTime = time.Duration((pt.dur - b.dur) / float64(q-1)).Round(time.Microsecond).String()
				perQPMem = fmt.Sprintf("%.1f KiB", (pt.rss-b.rss)/float64(q-1))
			} else {
				base[t.name] = pt
			}
			fmt.Printf("| %d | %s | %v | %s | %.0f KiB | %s | %d | %d |\n", q, t.name, time.Duration(pt.dur).Round(time.Millisecond), perQPTime,
				pt.rss, perQPMem, res.srv.maxMaps, res.srv.maxFDs)
		}
	}
	return nil
}

// proc is a started program.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
	maxHWM         int64 // KiB, VmHWM as last sampled
	maxMaps        int
	maxFDs         int
}

func startProc(ctx context.Context, argv, env []string, sample bool) (*proc, error) {
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	if sample {
		go p.sample(stop)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(stop)
		close(p.done)
	}()
	return p, nil
}

// sample records the most mappings and descriptors the process holds.
func (p *proc) sample(stop chan struct{}) {
	dir := fmt.Sprintf("/proc/%d", p.cmd.Process.Pid)
	for {
		if b, err := os.ReadFile(dir + "/maps"); err == nil {
			p.maxMaps = max(p.maxMaps, bytes.Count(b, []byte("\n")))
		}
		if b, err := os.ReadFile(dir + "/status"); err == nil {
			p.maxHWM = max(p.maxHWM, statusKiB(b, "VmHWM:"))
		}
		if ents, err := os.ReadDir(dir + "/fd"); err == nil {
			p.maxFDs = max(p.maxFDs, len(ents))
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// statusKiB reads a "Name:   123 kB" line of /proc/PID/status. (wait4's
// ru_maxrss cannot serve: exec carries the parent's peak into the child's.)
func statusKiB(status []byte, name string) int64 {
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) out() string { return p.stdout.String() + p.stderr.String() }
