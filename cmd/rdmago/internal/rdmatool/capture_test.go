package rdmatool

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// Captures: a run of rdmago rdma in the VM with the netlink messages it
// exchanged and the task names it read, next to the C tool's output on
// the same state. The host's unit tests replay the messages and check
// that the output is the C tool's.

// capture is one capture file (testdata/captures/*.json).
type capture struct {
	Args      []string          `json:"args"`
	Kernel    string            `json:"kernel"`
	Stdout    string            `json:"stdout"`
	Stderr    string            `json:"stderr"`
	Status    int               `json:"status"`
	Comm      map[string]string `json:"comm,omitempty"`
	Exchanges []exchange        `json:"exchanges"`
}

// exchange is one request and the kernel's answer: reply payloads in hex,
// or an errno.
type exchange struct {
	Cmd     uint16   `json:"cmd"`
	Flags   uint16   `json:"flags"`
	Req     string   `json:"req"`
	Replies []string `json:"replies,omitempty"`
	Errno   int      `json:"errno,omitempty"`
}

// recorder wraps the kernel's transport and keeps every exchange.
type recorder struct {
	t   transport
	log *[]exchange
}

func (r recorder) request(cmd uint16, flags netlink.HeaderFlags, attrs []byte) ([][]byte, error) {
	out, err := r.t.request(cmd, flags, attrs)
	x := exchange{Cmd: cmd, Flags: uint16(flags), Req: hex.EncodeToString(attrs)}
	for _, b := range out {
		x.Replies = append(x.Replies, hex.EncodeToString(b))
	}
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		x.Errno = int(en)
	case err != nil:
		return nil, err
	}
	*r.log = append(*r.log, x)
	return out, err
}

func (r recorder) Close() error { return r.t.Close() }

// runRecorded runs rdmago rdma args against the kernel, recording.
func runRecorded(args []string) (result, capture) {
	var c capture
	realDial, realComm := dial, procComm
	defer func() { dial, procComm = realDial, realComm }()
	dial = func() (transport, error) {
		t, err := realDial()
		if err != nil {
			return nil, err
		}
		return recorder{t: t, log: &c.Exchanges}, nil
	}
	c.Comm = map[string]string{}
	procComm = func(pid uint64) (string, bool) {
		s, ok := realComm(pid)
		if ok {
			c.Comm[strconv.FormatUint(pid, 10)] = s
		}
		return s, ok
	}
	return runGo(args...), c
}

// replayer answers requests from a capture, in order.
type replayer struct {
	x []exchange
}

func (r *replayer) request(cmd uint16, flags netlink.HeaderFlags, attrs []byte) ([][]byte, error) {
	if len(r.x) == 0 {
		return nil, fmt.Errorf("request %d beyond the capture", cmd)
	}
	x := r.x[0]
	r.x = r.x[1:]
	if x.Cmd != cmd || x.Flags != uint16(flags) || x.Req != hex.EncodeToString(attrs) {
		return nil, fmt.Errorf("request %d flags %#x %x, the capture has %d flags %#x %s", cmd, flags, attrs, x.Cmd, x.Flags, x.Req)
	}
	if x.Errno != 0 {
		return nil, syscall.Errno(x.Errno)
	}
	var out [][]byte
	for _, h := range x.Replies {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (r *replayer) Close() error { return nil }

// TestCaptures replays each capture: rdmago's output from the recorded
// messages is the C tool's, and every recorded request was made.
func TestCaptures(t *testing.T) {
	files, err := filepath.Glob("testdata/captures/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no captures in testdata/captures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var c capture
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			rp := &replayer{x: c.Exchanges}
			realDial, realComm := dial, procComm
			defer func() { dial, procComm = realDial, realComm }()
			dial = func() (transport, error) { return rp, nil }
			procComm = func(pid uint64) (string, bool) {
				s, ok := c.Comm[strconv.FormatUint(pid, 10)]
				return s, ok
			}
			o, e, st := tooltest.Run(Commands(), append([]string{"rdma"}, c.Args...)...)
			if d := fieldDiff(c.Stdout, o); d != "" {
				t.Errorf("rdma %q (kernel %s): stdout: %s", c.Args, c.Kernel, d)
			}
			if e != c.Stderr || st != c.Status {
				t.Errorf("rdma %q: stderr %q, status %d; the C tool: %q, %d", c.Args, e, st, c.Stderr, c.Status)
			}
			if len(rp.x) != 0 {
				t.Errorf("rdma %q: %d recorded requests not made", c.Args, len(rp.x))
			}
		})
	}
}
