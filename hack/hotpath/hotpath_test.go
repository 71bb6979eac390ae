// Package hotpath holds a test of the compiler's view of the data path:
// the helpers of posting and polling stay inlined, the post and poll
// functions gain no bounds check and nothing of theirs moves to the heap.
// The gains measured in docs/performance.md came from exactly these
// properties, and an innocent edit (one more branch in a helper, an index
// the prover no longer sees through) loses them without failing anything
// else.
package hotpath

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mustInline lists, per package, the helpers the hot paths call that must
// stay within the inliner's budget.
var mustInline = map[string][]string{
	"provider/mlx5": {
		// poll
		"(*cqRing).swOwned", "loadOpOwn", "swOwns", "(*resources).qpByRsn",
		"(*resources).reqRsn", "completeSend", "(*sendQueue).retired",
		"(*sendQueue).recordAt", "(*spinLock).lock", "(*spinLock).unlock",
		// post
		"(*sendQueue).plain", "(*sendQueue).overflow", "(*sendQueue).record",
		"(*sendQueue).putCtrl", "(*sendQueue).fmCeSe", "setDataSeg", "setRaddrSeg",
		"(*recvQueue).overflow",
	},
	// Both providers' posting loops sum each request's SGEs.
	"provider": {"SGLength"},
	"provider/rxe": {
		"(*queue).elem", "(*queue).full", "(*queue).producer", "(*queue).publish",
		"(*queue).consumer", "(*queue).empty", "(*queue).release", "(*queue).room",
		"(*queueLock).Lock", "(*queueLock).Unlock", "(*QP).plain",
	},
}

// mustInlineArch adds helpers that are inlined on one architecture only:
// on amd64 the barrier after a CQE's owner check is the compiler's
// ordering alone (provider/mlx5/barrier_fromdev_amd64.go).
var mustInlineArch = map[string]map[string][]string{
	"amd64": {"provider/mlx5": {"fromDeviceBarrier"}},
}

// hot lists, per package, the functions of posting and polling, each with
// the bounds checks it may keep and why. A check the compiler adds
// elsewhere in them fails the test; so does one it no longer needs (lower
// the figure).
var hot = map[string]map[string]int{
	"provider": {"SGLength": 0},
	"provider/mlx5": {
		"(*QP).PostSend":     0,
		"(*QP).postList":     0,
		"(*QP).ring":         0,
		"(*sendQueue).write": 0,
		"(*QP).PostRecv":     0,
		"(*CQ).Poll":         0,
		"decodeCQE":          0,
		"decodeReq":          0,
	},
	"provider/rxe": {
		"(*QP).PostSend":   0,
		"(*QP).postList":   0,
		"(*QP).writePlain": 0,
		// The inline-data copy: each SGE's bytes at a running offset.
		"(*QP).writeSendWQE": 1,
		"writeSGEs":          0,
		"(*QP).PostRecv":     0,
		"postRecv":           0,
		"(*CQ).Poll":         0,
	},
	"uverbs": {
		"(*QP).PostSend":         0,
		"(*kernelPort).Doorbell": 0,
		"(*QP).post":             0,
		"(*QP).PostRecv":         0,
		// The rare paths: completions taken ahead by a waiter, and the
		// library's own (flushed receives), each a slice at a count.
		"(*CQ).Poll":       2,
		"(*CQ).pollDevice": 0,
		// The count a provider returns, which is not trusted.
		"(*CQ).pollLoop": 1,
	},
}

func TestHotPaths(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the data path's architectures are amd64 and arm64")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds the packages for their diagnostics: %v", err)
	}
	root := repoRoot(t)
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			pkgs := slices.Sorted(func(yield func(string) bool) {
				for p := range hot {
					if !yield(p) {
						return
					}
				}
			})
			args := []string{"build", "-o", os.DevNull, "-gcflags=-m -d=ssa/check_bce/debug=1"}
			for _, p := range pkgs {
				args = append(args, "./"+p)
			}
			cmd := exec.Command(gobin, args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			diags := parseDiags(out)
			for _, p := range pkgs {
				funcs := funcRanges(t, filepath.Join(root, p), arch)
				checkPackage(t, p, arch, diags[p], funcs)
			}
		})
	}
}

// diag is one line of the compiler's output: file (base name), line, text.
type diag struct {
	file string
	line int
	msg  string
}

var diagRE = regexp.MustCompile(`^(\S+?)/([^/\s]+\.go):(\d+):\d+: (.*)$`)

// parseDiags groups the compiler's lines by package directory.
func parseDiags(out []byte) map[string][]diag {
	m := make(map[string][]diag)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		sub := diagRE.FindStringSubmatch(strings.TrimPrefix(sc.Text(), "./"))
		if sub == nil {
			continue
		}
		line, _ := strconv.Atoi(sub[3])
		m[sub[1]] = append(m[sub[1]], diag{file: sub[2], line: line, msg: sub[4]})
	}
	return m
}

// span is where a function's body lies.
type span struct {
	file       string
	start, end int
}

// funcRanges returns the functions of the package in dir that are built
// for linux/arch, named as the compiler names them ("(*T).M", "f").
func funcRanges(t *testing.T, dir, arch string) map[string]span {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	m := make(map[string]span)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || !builtFor(f, arch) {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			m[funcName(fd)] = span{filepath.Base(f), fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line}
		}
	}
	return m
}

// builtFor reports whether the file is compiled for linux/arch, by its
// name's suffixes and its go:build line (the tags this package's files
// use: architectures, linux, race).
func builtFor(path, arch string) bool {
	base := strings.TrimSuffix(filepath.Base(path), ".go")
	for _, a := range []string{"amd64", "arm64", "386", "arm", "riscv64"} {
		if strings.HasSuffix(base, "_"+a) && a != arch {
			return false
		}
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(src), "\n") {
		if c, ok := strings.CutPrefix(l, "//go:build "); ok {
			return evalBuild(c, arch)
		}
		if strings.HasPrefix(l, "package ") {
			break
		}
	}
	return true
}

// evalBuild evaluates a build constraint for a linux/arch build without
// the race detector, with go/build/constraint's grammar reduced to the
// operators: it substitutes each tag's truth and lets Go's own operators
// decide, parsing the result as a boolean expression.
func evalBuild(expr, arch string) bool {
	tagRE := regexp.MustCompile(`[A-Za-z0-9_.]+`)
	s := tagRE.ReplaceAllStringFunc(expr, func(tag string) string {
		return strconv.FormatBool(tag == arch || tag == "linux" || tag == "unix")
	})
	e, err := parser.ParseExpr(s)
	if err != nil {
		return true
	}
	return evalBool(e)
}

func evalBool(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "true"
	case *ast.ParenExpr:
		return evalBool(e.X)
	case *ast.UnaryExpr:
		return !evalBool(e.X)
	case *ast.BinaryExpr:
		if e.Op == token.LAND {
			return evalBool(e.X) && evalBool(e.Y)
		}
		return evalBool(e.X) || evalBool(e.Y)
	}
	return true
}

// funcName names a function as the compiler's -m output does.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	id, _ := typ.(*ast.Ident)
	if id == nil {
		return fd.Name.Name
	}
	if star != "" {
		return fmt.Sprintf("(*%s).%s", id.Name, fd.Name.Name)
	}
	return id.Name + "." + fd.Name.Name
}

func checkPackage(t *testing.T, pkg, arch string, diags []diag, funcs map[string]span) {
	t.Helper()
	canInline := make(map[string]bool)
	for _, d := range diags {
		if name, ok := strings.CutPrefix(d.msg, "can inline "); ok {
			canInline[strings.Fields(name)[0]] = true
		}
	}
	want := slices.Concat(mustInline[pkg], mustInlineArch[arch][pkg])
	for _, f := range want {
		if _, ok := funcs[f]; !ok {
			t.Errorf("%s: %s is listed to be inlined but does not exist for %s", pkg, f, arch)
			continue
		}
		if !canInline[f] {
			t.Errorf("%s: %s is no longer inlined on %s (go build -gcflags=-m=2 ./%s says why)", pkg, f, arch, pkg)
		}
	}
	for f, allowed := range hot[pkg] {
		sp, ok := funcs[f]
		if !ok {
			t.Errorf("%s: hot function %s does not exist", pkg, f)
			continue
		}
		var checks, heap []string
		for _, d := range diags {
			if d.file != sp.file || d.line < sp.start || d.line > sp.end {
				continue
			}
			switch {
			case strings.HasPrefix(d.msg, "Found Is"):
				checks = append(checks, fmt.Sprintf("%s:%d: %s", d.file, d.line, d.msg))
			case strings.HasPrefix(d.msg, "moved to heap"):
				// A local of the function on the heap: an allocation
				// on every call. (Values that escape on the error
				// paths do not count: TestHotPathAllocs and the
				// benchmarks hold the paths taken to no allocation.)
				heap = append(heap, fmt.Sprintf("%s:%d: %s", d.file, d.line, d.msg))
			}
		}
		if len(checks) != allowed {
			t.Errorf("%s %s: %d bounds checks on %s, want %d:\n\t%s", pkg, f, len(checks), arch, allowed, strings.Join(checks, "\n\t"))
		}
		if len(heap) > 0 {
			t.Errorf("%s %s allocates on %s:\n\t%s", pkg, f, arch, strings.Join(heap, "\n\t"))
		}
	}
}

// repoRoot is the module's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(wd))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	return root
}
