// Command faultrun runs a command while internal/faults drops or corrupts the
// RoCEv2 packets this host receives (or, with -egress, drops those it sends),
// then prints what the injector did, the
// change in the RDMA devices' hardware counters (rxe's retransmissions and
// retry errors) and how long the command took after the fault began. It
// exits with the command's status. It is for tests on the VM pair
// (make test-faults), where packets cross a real link: rxe loops traffic
// between two addresses of one host back inside the kernel, past XDP.
//
//	faultrun [flags] -- CMD [ARGS...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdma/internal/faults"
)

func main() {
	log := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "faultrun: "+format+"\n", a...) }
	var (
		iface     = flag.String("i", "", "interface to attach to (default: the netdev under rxe0's GID 1)")
		corrupt   = flag.Bool("corrupt", false, "corrupt a byte instead of dropping")
		egress    = flag.Bool("egress", false, "act on the packets this host sends (TCX, Linux 6.6 and later; drop only)")
		offset    = flag.Uint("offset", 0, "with -corrupt: the byte to flip, from the start of the BTH (default 12, the first after it)")
		prob      = flag.Float64("p", 0, "probability a matching packet is hit (0: every one, subject to -every)")
		every     = flag.Uint("every", 0, "hit every Nth matching packet")
		limit     = flag.Uint("limit", 0, "hit at most this many packets")
		opcode    = flag.String("opcode", "", "match this BTH opcode (a number or a name: write_only, ack, send_only…)")
		qpn       = flag.Int("qpn", -1, "match this destination QP number")
		psn       = flag.String("psn", "", "match this PSN range, FIRST-LAST")
		mad       = flag.String("mad", "", "match this CM MAD to QP1: REQ, REP, RTU, DREQ, DREP, REJ, MRA")
		countOnly = flag.Bool("off", false, "never act, only count packets and report the hw_counters")
		data      = flag.Bool("data", false, "leave QP1 (the CM's MADs) alone: faults on the data QPs only")
		after     = flag.Duration("after", 0, "turn the fault on this long after starting the command")
		dur       = flag.Duration("for", 0, "turn it off again after this long (0: until the command ends)")
		timeout   = flag.Duration("timeout", 0, "kill the command after this long and exit 124 (0: no limit), so that a stall still prints the counters")
	)
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: faultrun [flags] -- CMD [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fail := func(err error) {
		log("%v", err)
		os.Exit(2)
	}

	p := faults.Policy{Enabled: true, Probability: *prob, Every: uint32(*every), Limit: uint32(*limit), CorruptOffset: uint32(*offset)}
	p.SkipQP1 = *data
	p.Enabled = !*countOnly
	if *corrupt {
		p.Action = faults.Corrupt
	}
	if *opcode != "" {
		op, err := faults.ParseOpcode(*opcode)
		if err != nil {
			fail(err)
		}
		p.Opcode = &op
	}
	if *qpn >= 0 {
		q := uint32(*qpn)
		p.DestQPN = &q
	}
	if *psn != "" {
		a, b, ok := strings.Cut(*psn, "-")
		first, err1 := strconv.ParseUint(a, 0, 32)
		last, err2 := strconv.ParseUint(b, 0, 32)
		if !ok || err1 != nil || err2 != nil {
			fail(fmt.Errorf("-psn %q: want FIRST-LAST", *psn))
		}
		p.PSNRange, p.PSNFirst, p.PSNLast = true, uint32(first), uint32(last)
	}
	if *mad != "" {
		attrs := map[string]uint16{"REQ": faults.AttrREQ, "MRA": faults.AttrMRA, "REJ": faults.AttrREJ, "REP": faults.AttrREP,
			"RTU": faults.AttrRTU, "DREQ": faults.AttrDREQ, "DREP": faults.AttrDREP}
		a, ok := attrs[strings.ToUpper(*mad)]
		if !ok {
			fail(fmt.Errorf("-mad %q: not a CM MAD", *mad))
		}
		p.MADAttr = &a
	}

	if *iface == "" {
		nd, err := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1")
		if err != nil {
			fail(fmt.Errorf("no -i and no netdev for rxe0: %w", err))
		}
		*iface = strings.TrimSpace(string(nd))
	}
	attach := faults.Attach
	if *egress {
		attach = faults.AttachEgress
	}
	inj, err := attach(*iface)
	if err != nil {
		fail(err)
	}
	defer inj.Close()
	// Check the policy before starting anything: one that cannot be applied
	// must fail the run, not run it without faults.
	if err := inj.Set(p); err != nil {
		fail(err)
	}
	if err := inj.Set(faults.Policy{}); err != nil {
		fail(err)
	}
	before := hwCounters()

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var on, off time.Time
	onT := time.After(*after)
	var offT <-chan time.Time
	var killT <-chan time.Time
	if *timeout > 0 {
		killT = time.After(*timeout)
	}
	timedOut := false
	var werr error
wait:
	for {
		select {
		case <-onT:
			if err := inj.Set(p); err != nil {
				log("%v", err)
			}
			if !p.Enabled {
				break
			}
			on = time.Now()
			log("fault on %s (%s) at +%.3fs: %s", *iface, modeName(inj.Mode), on.Sub(start).Seconds(), describe(p))
			if *dur > 0 {
				offT = time.After(*dur)
			}
		case <-offT:
			if err := inj.Set(faults.Policy{}); err != nil {
				log("%v", err)
			}
			off = time.Now()
			log("fault off at +%.3fs", off.Sub(start).Seconds())
		case <-killT:
			log("timeout: killing the command after %v", *timeout)
			timedOut = true
			cmd.Process.Kill()
		case s := <-sig:
			cmd.Process.Signal(s)
		case werr = <-done:
			break wait
		}
	}
	end := time.Now()
	c, err := inj.Counters()
	if err != nil {
		log("%v", err)
	}
	log("%s: %v", *iface, c)
	after2 := hwCounters()
	var keys []string
	for k := range after2 {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var deltas []string
	for _, k := range keys {
		if d := after2[k] - before[k]; d != 0 {
			deltas = append(deltas, fmt.Sprintf("%s +%d", k, d))
		}
	}
	log("hw_counters: %s", strings.Join(deltas, ", "))
	status := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		status = ee.ExitCode()
		if status < 0 {
			status = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	default:
		log("%v", werr)
		status = 2
	}
	if timedOut {
		status = 124
	}
	msg := fmt.Sprintf("command exited %d after %.3fs", status, end.Sub(start).Seconds())
	if !on.IsZero() {
		msg += fmt.Sprintf(", %.3fs after the fault began", end.Sub(on).Seconds())
	}
	if !off.IsZero() {
		msg += fmt.Sprintf(", %.3fs after it ended", end.Sub(off).Seconds())
	}
	log("%s", msg)
	inj.Close()
	os.Exit(status)
}

func describe(p faults.Policy) string {
	var s []string
	s = append(s, map[faults.Action]string{faults.Drop: "drop", faults.Corrupt: "corrupt"}[p.Action])
	if p.SkipQP1 {
		s = append(s, "not QP1")
	}
	if p.Opcode != nil {
		s = append(s, fmt.Sprintf("opcode %#02x", *p.Opcode))
	}
	if p.MADAttr != nil {
		s = append(s, fmt.Sprintf("MAD attr %#04x", *p.MADAttr))
	} else if p.DestQPN != nil {
		s = append(s, fmt.Sprintf("QPN %#x", *p.DestQPN))
	}
	if p.PSNRange {
		s = append(s, fmt.Sprintf("PSN %d-%d", p.PSNFirst, p.PSNLast))
	}
	if p.Probability > 0 {
		s = append(s, fmt.Sprintf("p=%g", p.Probability))
	}
	if p.Every > 1 {
		s = append(s, fmt.Sprintf("every %d", p.Every))
	}
	if p.Limit > 0 {
		s = append(s, fmt.Sprintf("limit %d", p.Limit))
	}
	return strings.Join(s, " ")
}

// hwCounters reads every RDMA device's port 1 hardware counters, by
// "device/name".
func hwCounters() map[string]int64 {
	m := map[string]int64{}
	files, _ := filepath.Glob("/sys/class/infiniband/*/ports/1/hw_counters/*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		dev := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(f)))))
		m[dev+"/"+filepath.Base(f)] = v
	}
	return m
}

// modeName names where the program runs, for the log.
func modeName(mode string) string {
	if mode == "tcx-egress" {
		return "TCX egress"
	}
	return mode + " XDP"
}
