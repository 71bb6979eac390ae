// Package perftable reads what perftest's programs (and rdmago perf, which
// prints the same) write: the results rows and the TCP port a server
// listens on. The device tests and the side-by-side benchmark both need it.
package perftable

import (
	"fmt"
	"os"
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
