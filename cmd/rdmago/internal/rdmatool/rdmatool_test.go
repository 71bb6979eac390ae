package rdmatool

import (
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func TestNumMatch(t *testing.T) {
	for _, c := range []struct {
		f    string
		v    uint32
		want bool
	}{
		{"1", 1, true}, {"1", 2, false}, {"1-5", 5, true}, {"1-5", 6, false}, {"3,7-9", 8, true},
		{"3,7-9", 3, true}, {"3,7-9", 4, false}, {"x", 0, true}, {"", 0, true}, {"0x10", 0, true},
	} {
		if got := numMatch(c.f, c.v); got != c.want {
			t.Errorf("numMatch(%q, %d) = %v, want %v", c.f, c.v, got, c.want)
		}
	}
}

func TestPortOf(t *testing.T) {
	for _, c := range []struct {
		arg      string
		strict   bool
		port     uint32
		all, bad bool
	}{
		{"rxe0/1", true, 1, false, false}, {"rxe0/1", false, 1, false, false}, {"rxe0", true, 0, false, true},
		{"rxe0", false, 0, true, false}, {"rxe0/-", false, 0, false, false}, {"rxe0/-", true, 0, false, true},
		{"rxe0/x", false, 0, false, true}, {"rxe0/", false, 0, false, true}, {"rxe0/99999999999", false, 0, false, true},
	} {
		port, all, bad := portOf(c.arg, c.strict)
		if port != c.port || all != c.all || bad != c.bad {
			t.Errorf("portOf(%q, %v) = %d, %v, %v; want %d, %v, %v", c.arg, c.strict, port, all, bad, c.port, c.all, c.bad)
		}
	}
}

// TestDecodeMalformed: a truncated or overlong attribute is an error,
// never a panic or a partial table.
func TestDecodeMalformed(t *testing.T) {
	for _, b := range [][]byte{{1}, {8, 0, 1, 0}, {3, 0, 1, 0}, {0xff, 0xff, 1, 0, 0, 0, 0, 0}} {
		if _, err := decode(b); err == nil {
			t.Errorf("decode(%x) succeeded", b)
		}
	}
	a, err := decode([]byte{8, 0, 1, 0, 7, 0, 0, 0, 5, 0, 2, 0, 'x', 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if a.uint(1) != 7 || a.str(2) != "x" || a.has(3) || a.uint(3) != 0 {
		t.Errorf("decoded %+v", a)
	}
}

// fixedReplies answers every request with the same payloads.
type fixedReplies struct{ b [][]byte }

func (f fixedReplies) request(uint16, netlink.HeaderFlags, []byte) ([][]byte, error) { return f.b, nil }
func (f fixedReplies) Close() error                                                  { return nil }

// FuzzReplies runs the show commands on whatever the kernel might answer:
// no input makes rdmago panic or hang.
func FuzzReplies(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{8, 0, 1, 0, 0, 0, 0, 0, 9, 0, 2, 0, 'r', 'x', 'e', '0', 0, 0, 0, 0, 8, 0, 3, 0, 1, 0, 0, 0},
		[]byte{12, 0, 1, 0, 8, 0, 1, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, dev, reply []byte) {
		realDial := dial
		defer func() { dial = realDial }()
		dial = func() (transport, error) { return fixedReplies{[][]byte{dev, reply}}, nil }
		for _, args := range [][]string{{"dev"}, {"-d", "-j", "dev"}, {"link"}, {"res"}, {"res", "show", "qp"}, {"-j", "res", "show", "cm_id"},
			{"res", "show", "cq"}, {"res", "show", "mr"}, {"res", "show", "pd"}, {"res", "show", "ctx"}, {"-p", "statistic"}, {"system"}} {
			tooltest.Run(Commands(), append([]string{"rdma"}, args...)...)
		}
	})
}
