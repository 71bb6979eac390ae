//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUpstreamVersion(t *testing.T) {
	for in, want := range map[string]string{
		"1:7.2+dfsg-7+deb12u18": "7.2",
		"1:10.0.2+ds-1":         "10.0.2",
		"8.1.1-1":               "8.1.1",
		"9.2~rc1-1":             "9.2",
	} {
		if got := upstreamVersion(in); got != want {
			t.Errorf("upstreamVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadMark(t *testing.T) {
	got, err := readMark(strings.NewReader("ffffffff81000000 5 3\n401000 2 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []blockCount{{0xffffffff81000000, 5, 3}, {0x401000, 2, 10}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(blockCount{})); diff != "" {
		t.Errorf("readMark (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"401000 2\n", "zz 1 1\n", "401000 x 1\n", "401000 1 -1\n"} {
		if _, err := readMark(strings.NewReader(bad)); err == nil {
			t.Errorf("readMark(%q) accepted it", bad)
		}
	}
}

// A report of two marks: functions named by kallsyms and an executable's
// symbols, blocks outside both, the base subtracted and the division.
func TestIcprofReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kallsyms", `ffffffff81000000 T do_write
ffffffff81000100 t helper
ffffffff81000200 D some_data
ffffffff81000300 T after_data
`)
	// mark.0: the short run; mark.1: the long one.
	write("mark.0", "ffffffff81000010 10 100\nffffffff81000110 4 100\n")
	write("mark.1", `ffffffff81000010 10 300
ffffffff81000020 5 100
ffffffff81000110 4 100
ffffffff81000250 3 100
ffffffff80000000 2 50
401010 2 100
7f0000001000 7 100
`)
	user := symtab{{0x402000, 0x100, "main.later"}, {0x401000, 0x40, "main.loop"}}
	var out bytes.Buffer
	if err := icprofReport(&out, dir, 1, 0, 100, 10, user); err != nil {
		t.Fatal(err)
	}
	// do_write: (3000+500-1000)/100; helper cancels; some_data is not
	// text, so its block is helper's; below the first symbol is [kernel];
	// the last user block lies in no function given.
	want := `        38.0   total
        29.0   kernel
         9.0   user space
        25.0 k do_write
         7.0 u [user]
         3.0 k helper
         2.0 u main.loop
         1.0 k [kernel]
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if err := icprofReport(&out, dir, 2, -1, 1, 10, nil); err == nil {
		t.Error("a missing mark gave no error")
	}
}
