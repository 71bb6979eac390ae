// Command apicheck records the module's public API and checks that it
// changes only on purpose, as the Go project's api/go1.*.txt and
// api/next do for the standard library.
//
//	apicheck -list            print the API of every public package
//	apicheck [-dir api]       check it against api/v1.txt and api/next.txt
//
// api/v1.txt is the API as frozen for 1.0, never edited. api/next.txt
// records every change since, one line each, "+ " for an identifier added
// and "- " for one removed or changed (a changed signature is a removal
// and an addition). The check fails when the API differs from v1.txt with
// next.txt applied, and when an identifier next.txt names is not named in
// docs/from-v0.md, where each change is explained.
//
// Each line is one exported identifier and its signature, in the format of
// Go's api files: "pkg PATH, func F(int) error", "pkg PATH, method (*T)
// M() error", "pkg PATH, type T struct, F int", "pkg PATH, const C T = V".
// The types come from the compiler's export data (go list -export), so the
// listing is what the compiler sees, not what a parser guesses.
// docs/testing.md says why this is written here rather than taken from
// golang.org/x/exp (apidiff compares two builds but writes no reviewable
// listing; gorelease needs a tagged release to compare with).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

func main() {
	list := flag.Bool("list", false, "print the API and exit")
	dir := flag.String("dir", "api", "the folder of v1.txt and next.txt")
	doc := flag.String("doc", "docs/from-v0.md", "the page that explains each change")
	flag.Parse()
	api, err := currentAPI()
	if err != nil {
		fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
		os.Exit(1)
	}
	if *list {
		for _, l := range api {
			fmt.Println(l)
		}
		return
	}
	frozen, err := readLines(*dir + "/v1.txt")
	if err != nil {
		fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
		os.Exit(1)
	}
	next, err := readLines(*dir + "/next.txt")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
		os.Exit(1)
	}
	page, err := os.ReadFile(*doc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
		os.Exit(1)
	}
	if problems := check(api, frozen, next, string(page)); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, p)
		}
		fmt.Fprintf(os.Stderr, "apicheck: the API differs from %s/v1.txt with %s/next.txt applied: record each change in next.txt (\"+ LINE\" or \"- LINE\") and explain it in %s\n", *dir, *dir, *doc)
		os.Exit(1)
	}
}

// check compares the API with the frozen one plus the recorded changes,
// and the recorded changes with the page that must explain them.
func check(api, frozen, next []string, page string) []string {
	want := map[string]bool{}
	for _, l := range frozen {
		want[l] = true
	}
	var problems []string
	for _, l := range next {
		op, line, ok := strings.Cut(l, " ")
		switch {
		case !ok || (op != "+" && op != "-"):
			problems = append(problems, fmt.Sprintf("next.txt: %q is not \"+ LINE\" or \"- LINE\"", l))
			continue
		case op == "+":
			want[line] = true
		default:
			if !want[line] {
				problems = append(problems, fmt.Sprintf("next.txt removes %q, which the API did not have", line))
			}
			delete(want, line)
		}
		if name := identifier(line); !strings.Contains(page, name) {
			problems = append(problems, fmt.Sprintf("next.txt changes %s, which the explanation page does not name", name))
		}
	}
	have := map[string]bool{}
	for _, l := range api {
		have[l] = true
		if !want[l] {
			problems = append(problems, "unrecorded: + "+l)
		}
	}
	var gone []string
	for l := range want {
		if !have[l] {
			gone = append(gone, "unrecorded: - "+l)
		}
	}
	sort.Strings(gone)
	return append(problems, gone...)
}

// identifier is the name an API line is about, as a reader would search
// for it: "T.M" for a method or field, "F" for the rest.
func identifier(line string) string {
	_, rest, _ := strings.Cut(line, ", ")
	kind, rest, _ := strings.Cut(rest, " ")
	switch kind {
	case "method":
		// (*T) M(...)
		recv, rest, _ := strings.Cut(rest, ") ")
		recv = strings.TrimLeft(recv, "(*")
		name, _, _ := strings.Cut(rest, "(")
		return recv + "." + name
	case "type":
		name, rest, _ := strings.Cut(rest, " ")
		if _, field, ok := strings.Cut(rest, ", "); ok {
			f, _, _ := strings.Cut(field, " ")
			f, _, _ = strings.Cut(f, "(")
			return name + "." + f
		}
		return name
	default:
		name, _, _ := strings.Cut(rest, " ")
		name, _, _ = strings.Cut(name, "(")
		return name
	}
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

type listed struct {
	ImportPath string
	Name       string
	Export     string
	Standard   bool
}

// currentAPI lists the API of the module's public packages: every package
// but commands and those under internal/ and hack/.
func currentAPI() ([]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", "./...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(mod))
	exports := map[string]string{}
	var public []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		exports[p.ImportPath] = p.Export
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || p.Name == "main" || strings.Contains(rel+"/", "/internal/") || strings.HasPrefix(rel, "/hack/") || strings.HasPrefix(rel, "/cmd/") {
			continue
		}
		public = append(public, p.ImportPath)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f := exports[path]
		if f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var lines []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, err
		}
		lines = append(lines, packageAPI(pkg)...)
	}
	sort.Strings(lines)
	return slices.Compact(lines), nil
}

// packageAPI lists one package's exported identifiers.
func packageAPI(pkg *types.Package) []string {
	q := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	prefix := "pkg " + pkg.Path() + ", "
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Func:
			out = append(out, prefix+"func "+name+sigString(o.Type().(*types.Signature), q))
		case *types.Var:
			out = append(out, prefix+"var "+name+" "+types.TypeString(o.Type(), q))
		case *types.Const:
			out = append(out, prefix+"const "+name+" "+types.TypeString(o.Type(), q)+" = "+o.Val().ExactString())
		case *types.TypeName:
			out = append(out, typeAPI(prefix, o, q)...)
		}
	}
	return out
}

// typeAPI lists a type: its kind, its exported fields (of a struct) or
// methods (of an interface), and the methods of T and *T.
func typeAPI(prefix string, o *types.TypeName, q types.Qualifier) []string {
	name := o.Name()
	if tp, ok := o.Type().(*types.Named); ok && tp.TypeParams().Len() > 0 {
		var ps []string
		for i := range tp.TypeParams().Len() {
			p := tp.TypeParams().At(i)
			ps = append(ps, p.Obj().Name()+" "+types.TypeString(p.Constraint(), q))
		}
		name += "[" + strings.Join(ps, ", ") + "]"
	}
	under := o.Type().Underlying()
	var out []string
	if o.IsAlias() {
		return []string{prefix + "type " + name + " = " + types.TypeString(o.Type(), q)}
	}
	switch u := under.(type) {
	case *types.Struct:
		out = append(out, prefix+"type "+name+" struct")
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				out = append(out, prefix+"type "+name+" struct, embedded "+types.TypeString(f.Type(), q))
				continue
			}
			out = append(out, prefix+"type "+name+" struct, "+f.Name()+" "+types.TypeString(f.Type(), q))
		}
	case *types.Interface:
		out = append(out, prefix+"type "+name+" interface { "+interfaceMethods(u)+" }")
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				out = append(out, prefix+"type "+name+" interface, "+m.Name()+sigString(m.Type().(*types.Signature), q))
			}
		}
		return out
	default:
		out = append(out, prefix+"type "+name+" "+types.TypeString(under, q))
	}
	values := types.NewMethodSet(o.Type())
	pointers := types.NewMethodSet(types.NewPointer(o.Type()))
	for i := range pointers.Len() {
		sel := pointers.At(i)
		m := sel.Obj()
		if !m.Exported() || len(sel.Index()) > 1 {
			continue // unexported, or promoted from an embedded field
		}
		r := "*" + o.Name()
		if values.Lookup(m.Pkg(), m.Name()) != nil {
			r = o.Name()
		}
		out = append(out, prefix+"method ("+r+") "+m.Name()+sigString(m.Type().(*types.Signature), q))
	}
	return out
}

// interfaceMethods is an interface's method set in one line, unexported
// methods included: they decide who can implement it.
func interfaceMethods(u *types.Interface) string {
	var ms []string
	for i := range u.NumMethods() {
		ms = append(ms, u.Method(i).Name())
	}
	sort.Strings(ms)
	return strings.Join(ms, ", ")
}

// sigString is a signature without parameter names, which are not API:
// "(int, ...string) (bool, error)".
func sigString(sig *types.Signature, q types.Qualifier) string {
	list := func(t *types.Tuple, variadic bool) string {
		var ps []string
		for i := range t.Len() {
			ty := t.At(i).Type()
			if variadic && i == t.Len()-1 {
				ps = append(ps, "..."+types.TypeString(ty.(*types.Slice).Elem(), q))
				continue
			}
			ps = append(ps, types.TypeString(ty, q))
		}
		return strings.Join(ps, ", ")
	}
	s := "(" + list(sig.Params(), sig.Variadic()) + ")"
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		s += " " + list(r, false)
	default:
		s += " (" + list(r, false) + ")"
	}
	return s
}
