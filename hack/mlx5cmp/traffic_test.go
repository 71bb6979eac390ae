//go:build linux && amd64

package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTraffic runs rdma-core's programs on libmlx5 against rdmago's on its
// mlx5 provider, both ways, through one fake device that carries their
// messages (mlx5cmp pair): the pingpongs of every transport and perftest's
// bandwidth tests. Each pair must finish, each program must report the
// traffic it was asked for, and the device must have executed and
// delivered it. rdma-core against itself and rdmago against itself run
// too: the first checks the device model against the real driver on both
// ends.
func TestTraffic(t *testing.T) {
	requireCompare(t)
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	rdmago := filepath.Join(dir, "rdmago")
	lookC := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s: %v (Debian's ibverbs-utils and perftest packages)", name, err)
		}
		return p
	}
	const iters = 100
	type side struct{ executed, received int } // at least, for the server [0] and the client [1]
	tests := []struct {
		tool   string // the C program's name; rdmago's command is the same without "ibv_"
		args   []string
		report *regexp.Regexp // a line each program prints on success
		want   [2]side
	}{
		{"ibv_rc_pingpong", []string{"-g", "1", "-n", strconv.Itoa(iters), "-s", "16384", "-c"}, ppReport, [2]side{{iters, iters}, {iters, iters}}},
		{"ibv_uc_pingpong", []string{"-g", "1", "-n", strconv.Itoa(iters)}, ppReport, [2]side{{iters, iters}, {iters, iters}}},
		{"ibv_ud_pingpong", []string{"-g", "1", "-n", strconv.Itoa(iters), "-s", "1024"}, ppReport, [2]side{{iters, iters}, {iters, iters}}},
		{"ibv_srq_pingpong", []string{"-g", "1", "-n", strconv.Itoa(iters), "-q", "4"}, ppReport, [2]side{{iters, iters}, {iters, iters}}},
		{"ib_write_bw", []string{"-x", "1", "-n", "500", "-s", "4096"}, bwReport, [2]side{{0, 0}, {500, 0}}},
		{"ib_send_bw", []string{"-x", "1", "-n", "500", "-s", "4096"}, bwReport, [2]side{{0, 500}, {500, 0}}},
		{"ib_read_bw", []string{"-x", "1", "-n", "500", "-s", "4096"}, bwReport, [2]side{{0, 0}, {500, 0}}},
	}
	for _, tt := range tests {
		c := lookC(tt.tool)
		gocmd := strings.TrimPrefix(tt.tool, "ibv_")
		for _, pair := range []struct {
			name string
			argv [2][]string
		}{
			{"c-server/go-client", [2][]string{{c}, {rdmago, gocmd}}},
			{"go-server/c-client", [2][]string{{rdmago, gocmd}, {c}}},
			{"c/c", [2][]string{{c}, {c}}},
			{"go/go", [2][]string{{rdmago, gocmd}, {rdmago, gocmd}}},
		} {
			t.Run(tt.tool+"/"+pair.name, func(t *testing.T) {
				port := freePort(t)
				p := []string{"-p", strconv.Itoa(port)}
				server := slices.Concat(pair.argv[0], tt.args, p)
				client := slices.Concat(pair.argv[1], tt.args, p, []string{"127.0.0.1"})
				out := runPairCmd(t, dir, port, server, client)
				for i, who := range []string{"server", "client"} {
					lines := sideLines(out, i)
					if !tt.report.MatchString(lines) {
						t.Errorf("the %s (%s) printed no report:\n%s", who, pair.argv[i][0], out)
					}
					if strings.Contains(lines, "invalid data") || strings.Contains(lines, "Couldn't") {
						t.Errorf("the %s (%s) failed:\n%s", who, pair.argv[i][0], out)
					}
					ex, rc := deviceCounts(t, out, i)
					if ex < tt.want[i].executed || rc < tt.want[i].received {
						t.Errorf("the device executed %d requests and delivered %d messages for the %s, want at least %d and %d:\n%s",
							ex, rc, who, tt.want[i].executed, tt.want[i].received, out)
					}
				}
			})
		}
	}
}

var (
	ppReport = regexp.MustCompile(`(?m)^\d+ iters in [\d.]+ seconds`)
	bwReport = regexp.MustCompile(`(?m)^\s*4096\s+500\s+[\d.]+\s+[\d.]+`)
	countsRE = regexp.MustCompile(`(?m)^mlx5cmp pair: \[(\d)\] \S+: (\d+) requests executed, (\d+) messages received`)
)

// runPairCmd runs mlx5cmp pair and returns its output; the pair must
// succeed.
func runPairCmd(t *testing.T, dir string, port int, server, client []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"pair", "-profile", profile, "-port", strconv.Itoa(port), "-timeout", "2m", "--"}, server...)
	args = append(append(args, "--"), client...)
	b, err := exec.CommandContext(ctx, filepath.Join(dir, "mlx5cmp"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("mlx5cmp %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}

// sideLines returns the lines program i printed (tagged "[i] ").
func sideLines(out string, i int) string {
	tag := fmt.Sprintf("[%d] ", i)
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, tag); ok {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// deviceCounts returns what the device did for program i.
func deviceCounts(t *testing.T, out string, i int) (executed, received int) {
	t.Helper()
	for _, m := range countsRE.FindAllStringSubmatch(out, -1) {
		if m[1] == strconv.Itoa(i) {
			executed, _ = strconv.Atoi(m[2])
			received, _ = strconv.Atoi(m[3])
			return executed, received
		}
	}
	t.Fatalf("no device counts for program %d:\n%s", i, out)
	return 0, 0
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
