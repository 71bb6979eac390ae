// Package perftable reads what perftest's programs (and rdmago perf, which
// prints the same) write: the results rows and the TCP port a server
// listens on; and whether an rdma_cm server listens. The device tests and
// the side-by-side benchmark both need it.
package perftable

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Rows returns the rows under the results heading (" #bytes ..."), each
// split into its fields.
func Rows(out string) [][]string {
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, " #bytes"):
			in = true
		case strings.HasPrefix(line, "----"):
			in = false
		case in && strings.TrimSpace(line) != "":
			rows = append(rows, strings.Fields(line))
		}
	}
	return rows
}

// Listening reports whether a TCP socket of this host listens on port.
// It reads /proc/net/tcp{,6}: connecting to find out would take a
// perftest server's only connection.
func Listening(port int) bool {
	suffix := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], suffix) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// CMListening reports whether an rdma_cm ID listens on port, from the
// kernel's table of them (rdma res show cm_id): rdma_cm listeners are not
// in /proc/net/tcp.
func CMListening(port int) bool {
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
	if err != nil {
		return false
	}
	suffix := ":" + strconv.Itoa(port) + " "
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " state LISTEN ") && strings.Contains(line+" ", suffix) {
			return true
		}
	}
	return false
}
