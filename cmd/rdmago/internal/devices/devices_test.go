package devices

import (
	"strings"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m, Commands()) }

// The usage and option errors, as ibv_asyncwatch prints them (its text,
// with rdmago's name for argv[0]).
func TestAsyncwatchOptions(t *testing.T) {
	usage := "Usage:\n  asyncwatch            start an asyncwatch process\n\nOptions:\n" +
		"  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n" +
		"  -h, --help             print a help text and exit\n"
	for _, c := range []struct {
		args           []string
		stdout, stderr string
		status         int
	}{
		{[]string{"-h"}, usage, "", 0},
		{[]string{"--help"}, usage, "", 0},
		{[]string{"-x"}, usage, "asyncwatch: invalid option -- 'x'\n", 1},
		{[]string{"-d"}, usage, "asyncwatch: option requires an argument -- 'd'\n", 1},
		{[]string{"--ib-dev"}, usage, "asyncwatch: option '--ib-dev' requires an argument\n", 1},
		{[]string{"--help=x"}, usage, "asyncwatch: option '--help' doesn't allow an argument\n", 1},
	} {
		o, e, st := tooltest.Run(Commands(), append([]string{"asyncwatch"}, c.args...)...)
		if o != c.stdout || e != c.stderr || st != c.status {
			t.Errorf("asyncwatch %q: status %d, stdout %q, stderr %q; want %d, %q, %q", c.args, st, o, e, c.status, c.stdout, c.stderr)
		}
	}
	if o, _, st := tooltest.Run(Commands(), "devices", "-h"); st != 0 || !strings.HasPrefix(o, "Usage: ibv_devices") {
		t.Errorf("devices -h: %d %q", st, o)
	}
}
