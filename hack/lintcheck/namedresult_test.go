// Package lintcheck holds checks of the module's source that no vet or
// staticcheck analyzer makes, each for a mistake this project has made.
package lintcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeferredCleanupOfNamedResult finds constructors whose deferred
// cleanup reads a named result that a failing return sets to nil:
//
//	func newConn(...) (c *conn, err error) {
//		c = &conn{...}
//		defer func() { if err != nil { c.release() } }()
//		...
//		return nil, err // c is nil when the deferred call runs
//
// Return values are assigned before deferred calls run, so the cleanup
// meets nil: a panic where a release was meant (valkeyrdma's Accept died of
// this on the first request it could not serve).
func TestDeferredCleanupOfNamedResult(t *testing.T) {
	for _, f := range moduleFiles(t) {
		for _, p := range namedResultCleanups(t, f) {
			t.Errorf("%s", p)
		}
	}
}

// TestNamedResultCheckFinds runs the check on the mistake and on its fix.
func TestNamedResultCheckFinds(t *testing.T) {
	const src = `package p
func bad() (c *T, err error) {
	c = &T{}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	return nil, err
}
func good() (_ *T, err error) {
	c := &T{}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	return nil, err
}
func keeps() (c *T, err error) {
	c = &T{}
	defer func() { c.release() }()
	return c, err
}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := namedResultCleanups(t, path)
	if len(got) != 1 || !strings.Contains(got[0], "bad") {
		t.Errorf("found %q, want bad alone", got)
	}
}

// moduleFiles lists the module's Go files, tests and generators included.
func moduleFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", "../..", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("no git checkout to list: %v", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		files = append(files, filepath.Join("../..", f))
	}
	if len(files) == 0 {
		t.Fatal("git lists no Go files")
	}
	return files
}

// namedResultCleanups reports each function of path with a named result
// that a deferred closure uses as a receiver or operand of a selector
// while some return gives nil in its place.
func namedResultCleanups(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	check := func(name string, typ *ast.FuncType, body *ast.BlockStmt) {
		if typ.Results == nil || body == nil {
			return
		}
		// The position of each named result among the results.
		pos := map[string]int{}
		i := 0
		for _, field := range typ.Results.List {
			if len(field.Names) == 0 {
				i++
				continue
			}
			for _, n := range field.Names {
				if n.Name != "_" {
					pos[n.Name] = i
				}
				i++
			}
		}
		if len(pos) == 0 {
			return
		}
		used := map[string]bool{} // named results a deferred closure selects on
		nilAt := map[int]bool{}   // results some return gives as nil
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.DeferStmt:
				if lit, ok := n.Call.Fun.(*ast.FuncLit); ok {
					ast.Inspect(lit.Body, func(m ast.Node) bool {
						if sel, ok := m.(*ast.SelectorExpr); ok {
							if id, ok := sel.X.(*ast.Ident); ok {
								if _, named := pos[id.Name]; named {
									used[id.Name] = true
								}
							}
						}
						return true
					})
				}
			case *ast.FuncLit:
				// Returns of a nested function are its own.
				return false
			case *ast.ReturnStmt:
				for j, r := range n.Results {
					if id, ok := r.(*ast.Ident); ok && id.Name == "nil" {
						nilAt[j] = true
					}
				}
			}
			return true
		})
		for v := range used {
			if nilAt[pos[v]] {
				found = append(found, fmt.Sprintf("%s: %s: a deferred closure uses the named result %s, which a return sets to nil first", fset.Position(body.Pos()), name, v))
			}
		}
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			check(fd.Name.Name, fd.Type, fd.Body)
		}
	}
	return found
}
