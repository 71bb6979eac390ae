//go:build linux

package main

// The valkey part: a valkey-server built with its RDMA transport (bin/vm
// valkey), and two tables.
//
// The first is `rdmago valkey-benchmark`'s SET and GET rates over the
// server's RDMA port (package valkeyrdma) and over its TCP port, for 16 B,
// 1 KiB and 64 KiB values with 1 and 16 clients, the two transports
// alternating -reps times. The figures are the client's own: the requests
// alone, after every client has connected.
//
// The second sets the Go client beside valkey's C one. valkey-benchmark
// (8.1) has no RDMA transport; valkey's RDMA client is tests/rdma/rdma-test,
// which prints no figures: per thread, a PING, N random 1 KiB values made,
// the N keys SET one by one, one BGSAVE from the first thread there, the N
// keys read back and compared, with a line after each step.
// `rdmago valkey-benchmark -t rdma-test` runs the same sequence and prints
// the same lines, and both programs are timed by those lines' arrival
// (rdma-test's stdout made line-buffered with stdbuf): with one thread,
// SET is the time from "prepare" to "SET", GET from "BGSAVE" to "GET". With
// 16 threads the threads' steps overlap, so the figure is the whole
// sequence's, from the first PING's line to the last GET's, building the
// values included, for both alike.

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
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

var (
	valkeyDir  = "" // -valkey: the directory of valkey-server and rdma-test
	cpuSplitOn bool // -cpusplit (cpuSnap)
)

const (
	valkeyTCPPort  = 16379
	valkeyRDMAPort = 16380
)

// valkeyServer starts valkey-server on *ip over TCP and RDMA, without
// persistence (BGSAVE still writes a dump, into a temporary directory).
func valkeyServer(ctx context.Context) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "valkey-bench")
	if err != nil {
		return nil, err
	}
	argv := []string{filepath.Join(valkeyDir, "valkey-server"),
		"--bind", *ip, "--port", strconv.Itoa(valkeyTCPPort),
		"--rdma-bind", *ip, "--rdma-port", strconv.Itoa(valkeyRDMAPort),
		"--protected-mode", "no", "--save", "", "--appendonly", "no",
		// rdma-test's GET step starts at its BGSAVE, whose child then
		// compresses and checksums the dump on the VM's one CPU: a fifth
		// to a third of that step's samples, split by the scheduler, not
		// by the clients measured. A plain dump keeps the child short.
		"--rdbcompression", "no", "--rdbchecksum", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "valkey.log")}
	srv, err := startProc(ctx, argv, nil, false)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() {
		srv.kill()
		os.RemoveAll(dir)
	}
	for !perftable.Listening(valkeyTCPPort) || !perftable.CMListening(valkeyRDMAPort) {
		select {
		case <-srv.done:
			log, _ := os.ReadFile(filepath.Join(dir, "valkey.log"))
			stop()
			return nil, fmt.Errorf("valkey-server exited: %v\n%s%s", srv.err, srv.out(), log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return stop, nil
}

// flushAll empties the server between runs, over TCP.
func flushAll() error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(*ip, strconv.Itoa(valkeyTCPPort)), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("*1\r\n$8\r\nFLUSHALL\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+OK\r\n" {
		return fmt.Errorf("FLUSHALL: %q, %v", line, err)
	}
	return nil
}

// valkeyBench runs one `rdmago valkey-benchmark` and returns its SET and
// GET rates.
func valkeyBench(ctx context.Context, rdma bool, clients, requests, size int) (set, get float64, err error) {
	if err := flushAll(); err != nil {
		return 0, 0, err
	}
	port := valkeyTCPPort
	argv := []string{rdmago, "valkey-benchmark", "--csv", "-h", *ip, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests), "-d", strconv.Itoa(size)}
	if rdma {
		port = valkeyRDMAPort
		argv = append(argv, "--rdma")
	}
	argv = append(argv, "-p", strconv.Itoa(port))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %v\n%s", argv, err, out)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %v\n%s", argv, err, out)
	}
	for _, r := range recs[1:] {
		v, err := strconv.ParseFloat(r[len(r)-1], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%q: %v\n%s", argv, err, out)
		}
		switch r[0] {
		case "SET":
			set = v
		case "GET":
			get = v
		}
	}
	if set == 0 || get == 0 {
		return 0, 0, fmt.Errorf("%q: no SET and GET rates\n%s", argv, out)
	}
	return set, get, nil
}

// errNoConnection is a client that failed before its first reply.
// rdma-test gives its connection 1 s, which the first connection after
// valkey-server starts sometimes takes under the instruction-counting
// clock; such a run is made again, up to three times, for either client.
var errNoConnection = errors.New("no connection")

// stepRE matches the progress lines of rdma-test and of
// valkey-benchmark -t rdma-test.
var stepRE = regexp.MustCompile(`^Valkey Over RDMA test thread\[\d+\] (PING/PONG|prepare|SET|BGSAVE|GET)\b.*\[OK\]$`)

// rdmaTestRun runs argv (one of the two rdma-test clients), timestamps
// its progress lines as they arrive, and returns the rates: with one
// thread, SET's and GET's; with more, the whole sequence's. label names
// the client in -cpusplit's lines.
func rdmaTestRun(ctx context.Context, label string, argv []string, threads, keys int) (set, get, whole float64, err error) {
	if err := flushAll(); err != nil {
		return 0, 0, 0, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	at := map[string][]time.Time{}
	snaps := map[string]cpuSnap{}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		now := time.Now()
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := stepRE.FindStringSubmatch(line); m != nil {
			at[m[1]] = append(at[m[1]], now)
			if cpuSplitOn && threads == 1 {
				snaps[m[1]] = snapCPU(cmd.Process.Pid)
			}
		}
	}
	err = cmd.Wait()
	if cpuSplitOn && threads == 1 && err == nil {
		printSplits(cmd, label, snaps, keys)
	}
	if err != nil {
		if len(at["PING/PONG"]) == 0 {
			err = fmt.Errorf("%w: %v", errNoConnection, err)
		}
		return 0, 0, 0, fmt.Errorf("%q: %w\n%s%s", argv, err, out.String(), stderr.String())
	}
	if len(at["GET"]) != threads || len(at["SET"]) != threads || len(at["BGSAVE"]) != 1 {
		return 0, 0, 0, fmt.Errorf("%q: not every thread's steps printed:\n%s%s", argv, out.String(), stderr.String())
	}
	rate := func(n int, from, to time.Time) float64 { return float64(n) / to.Sub(from).Seconds() }
	if threads == 1 {
		return rate(keys, at["prepare"][0], at["SET"][0]), rate(keys, at["BGSAVE"][0], at["GET"][0]), 0, nil
	}
	return 0, 0, rate(2*keys*threads, at["PING/PONG"][0], at["GET"][threads-1]), nil
}

func valkeyTable() error {
	if valkeyDir == "" {
		return fmt.Errorf("valkey: -valkey names no directory (bin/vm valkey builds one)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout*4)
	defer cancel()
	if err := valkeyBenchTable(ctx); err != nil {
		return err
	}
	return rdmaTestTable(ctx)
}

// valkeyBenchTable measures rdmago valkey-benchmark over RDMA and over TCP
// against one server, emptied between runs.
func valkeyBenchTable(ctx context.Context) error {
	stop, err := valkeyServer(ctx)
	if err != nil {
		return err
	}
	defer stop()

	fmt.Printf("\nvalkey: rdmago valkey-benchmark against valkey-server (RDMA port and TCP port), kernel %s, %d runs of each, alternating; median (range), requests/s\n\n", kernelRelease(), *reps)
	fmt.Println("| value | clients | requests | SET, RDMA | SET, TCP | RDMA / TCP | GET, RDMA | GET, TCP | RDMA / TCP |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, size := range []int{16, 1024, 65536} {
		for _, clients := range []int{1, 16} {
			name := fmt.Sprintf("%s, %d", sizeName(size), clients)
			if !rowRE.MatchString(name) {
				continue
			}
			requests := 2000
			if size >= 65536 {
				requests = 400
			}
			var vals [4][]float64 // SET RDMA, SET TCP, GET RDMA, GET TCP
			for range *reps {
				for i, rdma := range []bool{true, false} {
					s, g, err := valkeyBench(ctx, rdma, clients, requests, size)
					if err != nil {
						return err
					}
					vals[i] = append(vals[i], s)
					vals[2+i] = append(vals[2+i], g)
				}
			}
			fmt.Printf("| %s | %d | %d | %s | %s | %.3f | %s | %s | %.3f |\n", sizeName(size), clients, requests,
				spread(vals[0]), spread(vals[1]), median(vals[0])/median(vals[1]),
				spread(vals[2]), spread(vals[3]), median(vals[2])/median(vals[3]))
		}
	}
	return nil
}

// rdmaTestTable measures valkey's C client against rdmago's, each run
// against a server of its own. rdma-test's GET step starts at its BGSAVE,
// and the dump's child took longer with each dump one server had written
// (0.08, 0.17, 0.18 and 0.25 s of the VM's one CPU in four runs of 20,000
// keys, against 1.6 to 1.9 s for the step): with the clients taking
// turns on one server, whichever ran later in a round lost 2 to 5% of its
// GET rate to the server's history. A new server, with an empty
// directory, makes every run the first.
func rdmaTestTable(ctx context.Context) error {
	fmt.Printf("\nvalkey: valkey's C RDMA client (tests/rdma/rdma-test) and rdmago valkey-benchmark -t rdma-test, 1 KiB values, against valkey-server (a new one for each run), kernel %s, %d runs of each, alternating; median (range), requests/s\n\n", kernelRelease(), *reps)
	fmt.Println("| threads | keys each | step | rdma-test (C) | rdmago | rdmago / C | rdmago, waits in Go's poller | that / C | target |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, threads := range []int{1, 16} {
		if !rowRE.MatchString(fmt.Sprintf("rdma-test, %d", threads)) {
			continue
		}
		// One thread writes 20,000 keys, so that the GET step (1.6 s)
		// outweighs what else the server does in it (its BGSAVE's child,
		// its cron): with 2,000, five runs of one client spread over 8%
		// of its GET rate; with 20,000, over 1.5%.
		keys := 20000
		if threads > 1 {
			keys = 250
		}
		c := []string{"stdbuf", "-oL", filepath.Join(valkeyDir, "rdma-test"), "-h", *ip, "-p", strconv.Itoa(valkeyRDMAPort),
			"-t", strconv.Itoa(threads), "-m", strconv.Itoa(keys), "-M", strconv.Itoa(keys + 1)}
		g := []string{rdmago, "valkey-benchmark", "--rdma", "-t", "rdma-test", "-h", *ip, "-p", strconv.Itoa(valkeyRDMAPort),
			"-c", strconv.Itoa(threads), "-n", strconv.Itoa(keys), "-d", "1024"}
		// The Go client waits in the kernel, as the C one does; gp is
		// it with the runtime's poller instead, what WaitInKernel saves.
		gp := append(slices.Clone(g), "--wait-in-kernel=false")
		var vals [3][3][]float64 // [C, Go, Go poller][SET, GET, whole]
		names := [3]string{"C", "Go", "Go-poller"}
		for range *reps {
			for i, argv := range [][]string{c, g, gp} {
				stop, err := valkeyServer(ctx)
				if err != nil {
					return err
				}
				s, gt, w, err := rdmaTestRun(ctx, names[i], argv, threads, keys)
				for try := 1; errors.Is(err, errNoConnection) && try < 3; try++ {
					fmt.Fprintf(os.Stderr, "bench: %v; again\n", err)
					s, gt, w, err = rdmaTestRun(ctx, names[i], argv, threads, keys)
				}
				stop()
				if err != nil {
					return err
				}
				vals[i][0] = append(vals[i][0], s)
				vals[i][1] = append(vals[i][1], gt)
				vals[i][2] = append(vals[i][2], w)
			}
		}
		type step struct {
			name string
			k    int // index into vals[i]
		}
		steps := []step{{"SET (prepare to SET)", 0}, {"GET (BGSAVE to GET)", 1}}
		if threads > 1 {
			steps = []step{{"whole sequence (first PING to last GET; SETs and GETs counted)", 2}}
		}
		for _, st := range steps {
			c := median(vals[0][st.k])
			fmt.Printf("| %d | %d | %s | %s | %s | %.3f | %s | %.3f | ≥ 1.00 |\n", threads, keys, st.name,
				spread(vals[0][st.k]), spread(vals[1][st.k]), median(vals[1][st.k])/c,
				spread(vals[2][st.k]), median(vals[2][st.k])/c)
		}
	}
	return nil
}

func sizeName(n int) string {
	switch {
	case n >= 1024 && n%1024 == 0:
		return strconv.Itoa(n/1024) + " KiB"
	default:
		return strconv.Itoa(n) + " B"
	}
}

// -cpusplit: where the guest's CPU time goes between two progress lines
// of an rdma-test run with one thread (SET: "prepare" to "SET"; GET:
// "BGSAVE" to "GET"): the client's threads, valkey-server's main process,
// its BGSAVE child, idle, and the rest (interrupts, softirqs such as
// rxe's packet work, kernel threads), per request, on stderr. Run times
// are the tasks' schedstat (ns); idle and busy are /proc/stat ticks. A
// thread that has exited by the second line takes its time with it:
// rdma-test's does by its GET line, so a second GET client figure is the
// process's rusage at exit less its threads' run time at BGSAVE: exact,
// but with the program's exit in it.
//
// cpuSnap is one reading, taken as a progress line arrives.
type cpuSnap struct {
	at                 time.Time
	client, server, bg int64            // run time, ns
	idle, busy         int64            // /proc/stat ticks
	softTicks          int64            // /proc/stat's softirq ticks, within busy
	others             map[string]int64 // run time of every other thread, by comm
	clientCS, serverCS int64            // context switches, voluntary + not
	softirqs           []softirqCount
}

// softirqCount is how often one softirq vector ran, on all CPUs
// (/proc/softirqs): where the time charged to no process went.
type softirqCount struct {
	name string
	n    int64
}

func readSoftirqs() []softirqCount {
	b, _ := os.ReadFile("/proc/softirqs")
	var out []softirqCount
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		c := softirqCount{name: strings.TrimSpace(name)}
		for _, v := range strings.Fields(rest) {
			n, _ := strconv.ParseInt(v, 10, 64)
			c.n += n
		}
		out = append(out, c)
	}
	return out
}

// taskSum is process pid's run time (procCPU; 0 once it has exited) and
// its threads' context switches.
func taskSum(pid int) (run, cs int64) {
	run, _ = procCPU(pid)
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, _ := os.ReadDir(dir)
	for _, t := range tids {
		s, _ := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		for _, line := range strings.Split(string(s), "\n") {
			name, v, ok := strings.Cut(line, ":")
			if ok && strings.HasSuffix(name, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				cs += n
			}
		}
	}
	return run, cs
}

func snapCPU(client int) cpuSnap {
	s := cpuSnap{at: time.Now()}
	s.client, s.clientCS = taskSum(client)
	ents, _ := os.ReadDir("/proc")
	main := 0
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		if strings.TrimSpace(string(comm)) == "valkey-server" {
			pids = append(pids, pid)
			if main == 0 || pid < main {
				main = pid
			}
		}
	}
	s.others = otherThreads(append([]int{client}, pids...))
	for _, pid := range pids {
		run, cs := taskSum(pid)
		if pid == main {
			s.server, s.serverCS = run, cs
		} else {
			s.bg += run
		}
	}
	s.softirqs = readSoftirqs()
	b, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 6 {
			s.softTicks = n
		}
		if i == 3 || i == 4 { // idle, iowait
			s.idle += n
		} else if i < 8 {
			s.busy += n
		}
	}
	return s
}

// otherThreads sums the run time of the threads of every process but
// skip, by the thread's name: the kernel's threads (ksoftirqd, kworker,
// rcu) and the bench's own.
func otherThreads(skip []int) map[string]int64 {
	out := map[string]int64{}
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/schedstat")
	for _, t := range tasks {
		pid, _ := strconv.Atoi(strings.Split(t, "/")[2])
		if slices.Contains(skip, pid) {
			continue
		}
		b, _ := os.ReadFile(t)
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		comm, _ := os.ReadFile(filepath.Join(filepath.Dir(t), "comm"))
		out[strings.TrimSpace(string(comm))] += ns
	}
	return out
}

func printSplit(label string, a, b cpuSnap, n int) {
	per := func(d int64) float64 { return float64(d) / float64(n) / 1e3 } // µs per request
	tick := int64(1e9 / 100)
	wall := b.at.Sub(a.at).Nanoseconds()
	// An exited client reads as 0: its time and switches went with it.
	client, clientCS := fmt.Sprintf("%.2f", per(b.client-a.client)), fmt.Sprintf("%.3f", float64(b.clientCS-a.clientCS)/float64(n))
	if b.client < a.client {
		client, clientCS = "(exited)", "(exited)"
	}
	fmt.Fprintf(os.Stderr, "cpusplit %s: %d requests, µs per request: wall %.2f, client %s, server %.2f, BGSAVE child %.2f, idle %.2f, busy %.2f; context switches per request: client %s, server %.3f\n",
		label, n, per(wall), client, per(b.server-a.server), per(max(b.bg-a.bg, 0)),
		per((b.idle-a.idle)*tick), per((b.busy-a.busy)*tick),
		clientCS, float64(b.serverCS-a.serverCS)/float64(n))
	var irqs []string
	for i, c := range b.softirqs {
		if i < len(a.softirqs) && a.softirqs[i].name == c.name && c.n != a.softirqs[i].n {
			irqs = append(irqs, fmt.Sprintf("%s %.3f", c.name, float64(c.n-a.softirqs[i].n)/float64(n)))
		}
	}
	fmt.Fprintf(os.Stderr, "cpusplit %s: softirq time %.2f µs per request; softirqs per request: %s\n",
		label, per((b.softTicks-a.softTicks)*tick), strings.Join(irqs, ", "))
	type other struct {
		comm string
		d    int64
	}
	var others []other
	var sum int64
	for comm, v := range b.others {
		if d := v - a.others[comm]; d > 0 {
			others = append(others, other{comm, d})
			sum += d
		}
	}
	slices.SortFunc(others, func(x, y other) int { return int(y.d - x.d) })
	var parts []string
	for _, o := range others[:min(len(others), 8)] {
		parts = append(parts, fmt.Sprintf("%s %.3f", o.comm, per(o.d)))
	}
	fmt.Fprintf(os.Stderr, "cpusplit %s: other threads %.2f µs per request: %s\n", label, per(sum), strings.Join(parts, ", "))
}

func printSplits(cmd *exec.Cmd, label string, snaps map[string]cpuSnap, keys int) {
	printSplit(label+" SET", snaps["prepare"], snaps["SET"], keys)
	printSplit(label+" GET", snaps["BGSAVE"], snaps["GET"], keys)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		total := ru.Utime.Nano() + ru.Stime.Nano()
		fmt.Fprintf(os.Stderr, "cpusplit %s GET: client from BGSAVE to its exit (rusage): %.2f µs per request\n",
			label, float64(total-snaps["BGSAVE"].client)/float64(keys)/1e3)
	}
}
