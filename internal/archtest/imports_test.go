package archtest

import (
	"bufio"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rdmago/rdma/"

// docImports reads the imports block of docs/architecture.md: a package
// and the module packages it imports, per line, lowest first.
func docImports(t *testing.T) (order []string, imports map[string][]string) {
	t.Helper()
	f, err := os.Open("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	imports = map[string][]string{}
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := sc.Text()
		switch {
		case l == "```imports":
			in = true
		case in && l == "```":
			return order, imports
		case in:
			fs := strings.Fields(l)
			order = append(order, fs[0])
			imports[fs[0]] = fs[1:]
		}
	}
	t.Fatal("docs/architecture.md has no imports block")
	return nil, nil
}

// The table lists every library package with exactly what its non-test
// files import from the module, for every GOOS the module builds on, and
// no package imports one listed after it.
func TestImportGraph(t *testing.T) {
	order, want := docImports(t)
	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	for _, goos := range []string{"linux", "darwin"} {
		ctx := build.Default
		ctx.GOOS, ctx.CgoEnabled = goos, false
		for _, p := range order {
			bp, err := ctx.ImportDir(filepath.Join("../..", p), 0)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			var got []string
			for _, imp := range bp.Imports {
				if rest, ok := strings.CutPrefix(imp, module); ok {
					got = append(got, rest)
				}
			}
			slices.Sort(got)
			w := slices.Sorted(slices.Values(want[p]))
			if !slices.Equal(got, w) {
				t.Errorf("GOOS=%s: %s imports %v; docs/architecture.md says %v", goos, p, got, w)
			}
			for _, imp := range got {
				if i, ok := pos[imp]; !ok || i >= pos[p] {
					t.Errorf("%s imports %s, which is not listed before it", p, imp)
				}
			}
		}
	}
	// Every library package is in the table.
	for _, dir := range []string{"wr", "qp", "provider", "uverbs", "mr", "cm", "rsocket", "internal"} {
		filepath.WalkDir(filepath.Join("../..", dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel("../..", path)
			if strings.Contains(rel, "testdata") || rel == "internal" {
				return nil
			}
			bp, err := build.Default.ImportDir(path, 0)
			if err != nil || len(bp.GoFiles) == 0 {
				return nil // tests only, or no Go
			}
			if _, ok := pos[rel]; !ok && !testOnly(rel) {
				t.Errorf("package %s is not in docs/architecture.md's imports table", rel)
			}
			return nil
		})
	}
}

// testOnly names the internal packages that exist for tests and tools,
// outside the library's graph.
func testOnly(p string) bool {
	switch p {
	case "internal/testenv", "internal/rdmatest", "internal/faults", "internal/archtest", "internal/perftable":
		return true
	}
	return false
}
