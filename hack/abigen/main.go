// Command abigen holds the Go halves of hack/abigen/generate.sh, which runs
// it twice around "go tool cgo -godefs":
//
//	abigen extract -I DIR [-I DIR...] -dir WORK HEADER...
//
// preprocesses the kernel uAPI HEADERs (paths relative to an include
// directory, e.g. rdma/ib_user_verbs.h) with gcc -E -dD; finds every
// struct/union definition, enumerator and object-like #define that those
// headers (not the headers they include) define; drops the macros gcc does
// not accept as integer constant expressions; and writes the godefs input
// WORK/types.go plus WORK/meta.json for the second step:
//
//	abigen post -dir WORK -version V -o OUT.go -sizetest OUT_test.go <godefs-output
//
// replaces the godefs header, names the nested anonymous struct types,
// re-adds per-header section comments, gofmts the result and writes the
// size test. abigen itself never uses cgo.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

var (
	incDirs multiFlag
	cc      = "gcc"
)

// meta is what extract tells post.
type meta struct {
	Headers []string
	Types   []*goType  // in output order
	Consts  []constant // in output order
	Dropped []constant // macros that are not integer constants
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: abigen extract|post [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("abigen "+os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "", "work directory shared by extract and post")
	var err error
	switch os.Args[1] {
	case "extract":
		fs.Var(&incDirs, "I", "include directory (repeatable)")
		fs.StringVar(&cc, "cc", cc, "C compiler")
		fs.Parse(os.Args[2:])
		if len(incDirs) == 0 || fs.NArg() == 0 || *dir == "" {
			fs.Usage()
			os.Exit(2)
		}
		err = extract(*dir, fs.Args())
	case "post":
		version := fs.String("version", "", "linux-libc-dev version, for the header comment")
		out := fs.String("o", "", "generated Go file")
		test := fs.String("sizetest", "", "generated size test file")
		fs.Parse(os.Args[2:])
		if *dir == "" || *version == "" || *out == "" || *test == "" {
			fs.Usage()
			os.Exit(2)
		}
		err = post(*dir, *version, *out, *test)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "abigen:", err)
		os.Exit(1)
	}
}

func extract(dir string, headers []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := filepath.Join(dir, "all.c")
	if err := os.WriteFile(all, []byte(includes(headers)), 0o644); err != nil {
		return err
	}
	if err := checkDeps(all); err != nil {
		return err
	}
	pre, err := gcc("-E", "-dD", all)
	if err != nil {
		return err
	}
	types, consts := scan(pre)

	// Keep the types from the wanted headers and, transitively, the
	// tagged types they use from other headers (sockaddr_in6,
	// ib_user_path_rec, ...), so that the godefs output never mentions an
	// undefined _Ctype_ name.
	wanted := map[string]bool{}
	for _, h := range headers {
		wanted[h] = true
	}
	byTag := map[string]*goType{}
	for _, t := range types {
		if t.tag != "" {
			byTag[t.tag] = t
		}
	}
	keep := map[*goType]bool{}
	var add func(t *goType)
	add = func(t *goType) {
		if !keep[t] {
			keep[t] = true
			for _, r := range t.refs {
				if d := byTag[r]; d != nil {
					add(d)
				}
			}
		}
	}
	for _, t := range types {
		if wanted[t.Header] && t.parent == nil {
			add(t)
		}
	}
	for _, t := range types {
		if t.parent != nil {
			keep[t] = keep[t.parent] // nested anonymous structs go with their parent
		}
	}
	// Order: wanted headers in command-line order, then the others by
	// name; source order within a header.
	rank := func(h string) int {
		if i := slices.Index(headers, h); i >= 0 {
			return i
		}
		return len(headers)
	}
	var m meta
	m.Headers = headers
	for _, t := range types {
		if keep[t] {
			m.Types = append(m.Types, t)
		}
	}
	slices.SortStableFunc(m.Types, func(a, b *goType) int {
		if d := rank(a.Header) - rank(b.Header); d != 0 {
			return d
		}
		return strings.Compare(a.Header, b.Header) // 0 within a header: stable
	})
	names := map[string]string{}
	for _, t := range m.Types {
		if prev, dup := names[t.Name]; dup {
			return fmt.Errorf("type name %s is used by both %s and %s", t.Name, prev, t.C)
		}
		names[t.Name] = t.C
	}

	// Constants: those from the wanted headers, first definition wins.
	var cs []constant
	seen := map[string]bool{}
	for _, c := range consts {
		if !wanted[c.Header] || seen[c.Name] {
			continue
		}
		if t, clash := names[c.Name]; clash {
			return fmt.Errorf("constant %s clashes with the Go name of %s", c.Name, t)
		}
		seen[c.Name] = true
		cs = append(cs, c)
	}
	slices.SortStableFunc(cs, func(a, b constant) int {
		if d := rank(a.Header) - rank(b.Header); d != 0 {
			return d
		}
		return a.pos - b.pos
	})
	if m.Consts, m.Dropped, err = probe(dir, headers, cs); err != nil {
		return err
	}
	for _, d := range m.Dropped {
		fmt.Fprintf(os.Stderr, "abigen: dropped %s (%s): %s\n", d.Name, d.Header, d.Why)
	}

	if err := os.WriteFile(filepath.Join(dir, "types.go"), godefsInput(&m), 0o644); err != nil {
		return err
	}
	mj, err := json.MarshalIndent(&m, "", "\t")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "abigen: %d types, %d constants (+%d sizes), %d macros dropped\n",
		len(m.Types), len(m.Consts), len(m.Types), len(m.Dropped))
	return os.WriteFile(filepath.Join(dir, "meta.json"), mj, 0o644)
}

func includes(headers []string) string {
	var b strings.Builder
	for _, h := range headers {
		fmt.Fprintf(&b, "#include <%s>\n", h)
	}
	return b.String()
}

func gcc(args ...string) ([]byte, error) {
	var full []string
	for _, d := range incDirs {
		full = append(full, "-I"+d)
	}
	full = append(full, args...)
	cmd := exec.Command(cc, full...)
	cmd.Env = append(os.Environ(), "LC_ALL=C") // plain ASCII diagnostics
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(full, " "), err, stderr.Bytes())
	}
	return out, nil
}

// checkDeps makes sure every kernel header comes from the -I directories
// (the unpacked linux-libc-dev), never from the host's /usr/include.
func checkDeps(file string) error {
	out, err := gcc("-M", file)
	if err != nil {
		return err
	}
	deps := strings.Fields(strings.ReplaceAll(string(out), "\\\n", " "))
	for _, d := range deps[1:] { // deps[0] is the make target
		if relHeader(d) != d {
			continue
		}
		for _, k := range []string{"/linux/", "/asm/", "/asm-generic/", "/rdma/"} {
			if strings.Contains(d, k) {
				return fmt.Errorf("kernel header %s does not come from the pinned linux-libc-dev", d)
			}
		}
	}
	return nil
}

// relHeader turns a path gcc reports into one relative to the include
// directory it was found in; other paths ("<built-in>", libc) stay as they are.
func relHeader(p string) string {
	for _, d := range incDirs {
		if r, ok := strings.CutPrefix(p, filepath.Clean(d)+"/"); ok {
			return r
		}
	}
	return p
}

var gccDiag = regexp.MustCompile(`^(.*?):(\d+):\d+: (error|note): (.*)$`)

// probe compiles a _Static_assert for every macro and drops those gcc does
// not accept as integer constant expressions (strings, types, or macros
// using names their header does not declare).
func probe(dir string, headers []string, cs []constant) (keep, dropped []constant, err error) {
	why := map[string]string{}
	f := filepath.Join(dir, "probe.c")
	for pass := 0; ; pass++ {
		src := includes(headers)
		lineOf := map[int]string{}
		line := len(headers)
		for _, c := range cs {
			if c.macro && why[c.Name] == "" {
				line++
				lineOf[line] = c.Name
				src += fmt.Sprintf("_Static_assert((%s) || 1, \"\");\n", c.Name)
			}
		}
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			return nil, nil, err
		}
		_, gerr := gcc("-fsyntax-only", "-fmax-errors=0", "-Werror", f)
		if gerr == nil {
			break
		}
		// Blame the probe line each error is reported at or expanded
		// from, then try again without those macros.
		n, lastErr := 0, ""
		for _, l := range strings.Split(gerr.Error(), "\n") {
			m := gccDiag.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if m[3] == "error" {
				lastErr = m[4]
			}
			ln, _ := strconv.Atoi(m[2])
			if name := lineOf[ln]; m[1] == f && name != "" && why[name] == "" && lastErr != "" {
				why[name] = "gcc: " + lastErr
				n++
			}
		}
		if n == 0 || pass > 3 {
			return nil, nil, gerr
		}
	}
	for _, c := range cs {
		if why[c.Name] != "" {
			c.Why = why[c.Name]
			dropped = append(dropped, c)
		} else {
			keep = append(keep, c)
		}
	}
	return keep, dropped, nil
}

// godefsInput is the file handed to go tool cgo -godefs. Comments would be
// lost by godefs, so post re-adds the section comments from meta.json.
func godefsInput(m *meta) []byte {
	var b bytes.Buffer
	b.WriteString("//go:build ignore\n\npackage abi\n\n/*\n")
	b.WriteString(includes(m.Headers))
	for _, t := range m.Types {
		if t.Typedef != "" {
			b.WriteString(t.Typedef + "\n")
		}
	}
	b.WriteString("*/\nimport \"C\"\n\n")
	for _, t := range m.Types {
		fmt.Fprintf(&b, "type %s C.%s\n", t.Name, t.C)
	}
	b.WriteString("\nconst (\n")
	for _, t := range m.Types {
		fmt.Fprintf(&b, "\tSizeof%s = C.sizeof_%s\n", t.Name, t.C)
	}
	b.WriteString(")\n")
	for i, c := range m.Consts {
		if i == 0 || c.Header != m.Consts[i-1].Header {
			if i > 0 {
				b.WriteString(")\n")
			}
			b.WriteString("\nconst (\n")
		}
		fmt.Fprintf(&b, "\t%s = C.%s\n", c.Name, c.Name)
	}
	if len(m.Consts) > 0 {
		b.WriteString(")\n")
	}
	return b.Bytes()
}

const generatedBy = "// Code generated by hack/abigen/generate.sh; DO NOT EDIT.\n"

var (
	padField = regexp.MustCompile(`^Pad_cgo_\d+$`)
	anonType = regexp.MustCompile(`_Ctype_struct___\d+`)
	typeLine = regexp.MustCompile(`^type (\w+) `)
)

// post turns the godefs output on stdin into the final package file and
// writes the size test.
func post(dir, version, out, test string) error {
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return err
	}
	var m meta
	if err := json.Unmarshal(mj, &m); err != nil {
		return err
	}
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	byName := map[string]*goType{}
	typeSection := map[string]string{} // first type of a header -> header
	for i, t := range m.Types {
		byName[t.Name] = t
		if i == 0 || t.Header != m.Types[i-1].Header {
			typeSection[t.Name] = t.Header
		}
	}
	constSection := map[string]string{}
	for i, c := range m.Consts {
		if i == 0 || c.Header != m.Consts[i-1].Header {
			constSection[c.Name] = c.Header
		}
	}

	var b bytes.Buffer
	b.WriteString(generatedBy)
	fmt.Fprintf(&b, "// Source: Debian linux-libc-dev %s (trixie), headers\n", version)
	for _, h := range m.Headers {
		fmt.Fprintf(&b, "//   - <%s>\n", h)
	}
	b.WriteString(`// and the structs they embed from other uAPI headers, rendered by
// go tool cgo -godefs on linux/amd64. These structs use only fixed-width
// types (__u8 to __u64, __aligned_u64), so the layouts also hold on
// linux/arm64. They are plain data, built on every system so that programs
// using the API compile anywhere; only Linux's kernel speaks them.
`)
	b.WriteString("@LEFT@")
	if len(m.Dropped) > 0 {
		b.WriteString("//\n// Macros left out because they are not integer constant expressions:\n")
		for _, d := range m.Dropped {
			fmt.Fprintf(&b, "//   - %s (<%s>)\n", d.Name, d.Header)
		}
	}
	b.WriteString("\n")

	lines := strings.Split(string(body), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "package ") })
	if start < 0 {
		return fmt.Errorf("no package clause in godefs output")
	}
	// Drop godefs' own header, which names temporary paths.
	var cur *goType // type whose body is being copied
	var anon []anonRef
	var godefs, verbatim []string // per member of cur
	var rendered []bool
	var left []string // C members godefs left out
	flex := 0         // flexible array members, all left out
	endType := func() error {
		if cur == nil {
			return nil
		}
		if len(anon) > 0 {
			return fmt.Errorf("%s: godefs rendered fewer anonymous struct fields than expected: %v", cur.Name, anon)
		}
		for i, f := range cur.Fields {
			switch {
			case rendered[i]:
			case f.Flex:
				flex++
			case f.Bitfield:
				left = append(left, fmt.Sprintf("%s.%s (bit field)", cur.Name, verbatim[i]))
			default:
				left = append(left, fmt.Sprintf("%s.%s (zero-size, misaligned or packed)", cur.Name, verbatim[i]))
			}
		}
		cur = nil
		return nil
	}
	for i := start; i < len(lines); i++ {
		line := lines[i]
		if mt := typeLine.FindStringSubmatch(line); mt != nil {
			if err := endType(); err != nil {
				return err
			}
			cur = byName[mt[1]]
			if cur == nil {
				return fmt.Errorf("godefs output has unexpected type %s", mt[1])
			}
			anon = cur.Anon
			godefs, verbatim = godefsNames(cur.Fields)
			rendered = make([]bool, len(godefs))
			if h, ok := typeSection[cur.Name]; ok {
				fmt.Fprintf(&b, "\n// Types from <%s>.\n", h)
			}
			b.WriteString("\n")
		} else if f := strings.Fields(line); cur != nil && len(f) == 2 && line[0] == '\t' && !padField.MatchString(f[0]) {
			// Undo godefs' stripping of a prefix common to all
			// field names: Go names are the C names with the first
			// letter upper-cased.
			j := slices.Index(godefs, f[0])
			if j < 0 || rendered[j] {
				return fmt.Errorf("%s: unexpected field %s in godefs output", cur.Name, f[0])
			}
			rendered[j] = true
			line = "\t" + verbatim[j] + strings.TrimPrefix(line, "\t"+f[0])
		}
		if anonType.MatchString(line) {
			// Fields come in C order, so this is the next anonRef;
			// godefs may have stripped a prefix common to all fields.
			field := strings.ToLower(strings.Fields(line)[0])
			if cur == nil || len(anon) == 0 || !strings.HasSuffix(strings.ToLower(anon[0].Field), field) {
				return fmt.Errorf("cannot name the anonymous struct type in %q", strings.TrimSpace(line))
			}
			line = anonType.ReplaceAllString(line, anon[0].Type)
			anon = anon[1:]
		}
		if line == "const (" && i+1 < len(lines) {
			if err := endType(); err != nil {
				return err
			}
			if f := strings.Fields(lines[i+1]); len(f) > 0 {
				if h, ok := constSection[f[0]]; ok {
					fmt.Fprintf(&b, "// Constants from <%s>.\n", h)
				} else if strings.HasPrefix(f[0], "Sizeof") {
					b.WriteString("// Sizes of the types above, as C's sizeof gives them.\n")
				}
			}
		}
		b.WriteString(line + "\n")
	}
	if err := endType(); err != nil {
		return err
	}
	if i := bytes.Index(b.Bytes(), []byte("_Ctype_")); i >= 0 {
		l := b.Bytes()[i:]
		return fmt.Errorf("godefs output still uses a C type: %s", l[:bytes.IndexByte(l, '\n')])
	}
	var l strings.Builder
	if flex > 0 {
		fmt.Fprintf(&l, "//\n// The %d flexible array members (driver_data[], attrs[], ...) are left\n", flex)
		l.WriteString("// out: such an array starts at the Sizeof of its struct.\n")
	}
	if len(left) > 0 {
		l.WriteString("//\n// Other fields godefs left out:\n")
		for _, f := range left {
			fmt.Fprintf(&l, "//   - %s\n", f)
		}
	}
	src := bytes.Replace(b.Bytes(), []byte("@LEFT@"), []byte(l.String()), 1)
	if err := writeGo(out, src); err != nil {
		return err
	}
	return writeGo(test, sizeTest(m.Types))
}

// godefsNames mirrors cmd/cgo's naming of struct fields in godefs mode:
// anonymous members are anonN; a prefix (up to '_') shared by all names
// that have an '_' and do not start with '_' or "orig_" is stripped, unless
// that makes two names equal; the first letter is upper-cased ('_' becomes
// "X_"). It returns the godefs and the verbatim Go name of each member.
func godefsNames(ms []member) (godefs, verbatim []string) {
	var names []string
	anon := 0
	for _, m := range ms {
		n := m.Name
		if n == "" && !m.Bitfield {
			n = fmt.Sprintf("anon%d", anon)
			anon++
		}
		names = append(names, n)
	}
	prefix := ""
	for i, n := range names {
		if ms[i].Flex || ms[i].Bitfield || strings.HasPrefix(n, "orig_") || strings.HasPrefix(n, "_") {
			continue // never rendered, or ignored by cgo
		}
		if j := strings.Index(n, "_"); j >= 0 {
			if prefix == "" {
				prefix = n[:j+1]
			} else if prefix != n[:j+1] {
				prefix = ""
				break
			}
		}
	}
	seen := map[string]bool{}
	for i, n := range names {
		if ms[i].Flex || ms[i].Bitfield {
			continue
		}
		if n != prefix {
			n = strings.TrimPrefix(n, prefix)
		}
		if seen[upper(n)] {
			prefix = "" // cgo keeps the prefix rather than make names collide
		}
		seen[upper(n)] = true
	}
	for i, n := range names {
		verbatim = append(verbatim, upper(n))
		if n != prefix {
			n = strings.TrimPrefix(n, prefix)
		}
		if ms[i].Flex || ms[i].Bitfield {
			n = "" // never rendered
		}
		godefs = append(godefs, upper(n))
	}
	return godefs, verbatim
}

func upper(s string) string {
	if s == "" {
		return ""
	}
	if s[0] == '_' {
		return "X" + s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func writeGo(name string, src []byte) error {
	f, err := format.Source(src)
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return os.WriteFile(name, f, 0o644)
}

func sizeTest(types []*goType) []byte {
	var b bytes.Buffer
	b.WriteString(generatedBy)
	b.WriteString(`
//go:build linux

package abi

import "unsafe"

// sizes pairs every generated type's size with the one C's sizeof gave it;
// TestSizes checks them, guarding against hand edits and architecture
// mistakes.
var sizes = []valueCase[uintptr]{
`)
	for _, t := range types {
		fmt.Fprintf(&b, "\t{\"sizeof %s\", unsafe.Sizeof(%s{}), Sizeof%s},\n", t.Name, t.Name, t.Name)
	}
	b.WriteString("}\n")
	return b.Bytes()
}
