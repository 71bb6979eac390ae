//go:build linux

package main

// icprof counts the instructions a guest executes, per translated block,
// with a QEMU TCG plugin, between markers the guest executes (`vm mark`).
// Under --icount a guest's nanosecond is an instruction, so the counts
// say exactly where a benchmark's guest time goes, kernel and user space
// alike, both processes of a pair included: what perf's sampling inside
// the guest cannot resolve (docs/performance.md, "Counted per function").
//
// The plugin is built against the plugin API header of the QEMU the host
// runs, taken from the host suite's qemu source package.
//
// Cache layout (under cacheDir()/icprof/<qemu upstream version>/):
//
//	icprof.so   the plugin; written last

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

//go:embed plugin/icprof.c
var icprofSource []byte

// icprofEnv tells the guest's `vm mark` where the counts go, so that it
// can put the kernel's symbols beside them.
const icprofEnv = "RDMAGO_ICPROF"

func cmdIcprof(args []string) int {
	if len(args) > 0 && args[0] == "report" {
		return cmdIcprofReport(args[1:])
	}
	fs := flag.NewFlagSet("vm icprof", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm icprof
       vm icprof report [flags] DIR K

The first form builds the QEMU plugin that "vm run --icount --icprof DIR" loads
(from the host suite's qemu source package, into the cache) and prints its
path. In the guest, "vm mark" writes DIR/mark.N: the instructions executed
per translated block since the previous mark. "report" prints them per
function; run "vm icprof report -h" for its flags.
`)
	}
	fs.Parse(args)
	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return 1
	}
	so, err := prepareIcprof(context.Background(), c)
	if err != nil {
		logf("icprof: %v", err)
		return 1
	}
	fmt.Println(so)
	return 0
}

// cmdMark runs in the guest: it saves the kernel's symbols beside the
// counts once, then executes the marker.
func cmdMark(args []string) int {
	if !haveMark {
		logf("mark: the marker is an x86 instruction")
		return 2
	}
	if dir := os.Getenv(icprofEnv); dir != "" {
		path := filepath.Join(dir, "kallsyms")
		if _, err := os.Stat(path); err != nil {
			data, err := os.ReadFile("/proc/kallsyms")
			if err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
			if err != nil {
				logf("mark: %v", err)
			}
		}
	}
	mark()
	return 0
}

// prepareIcprof returns the plugin's path, building it if the cache lacks
// it for the QEMU installed.
func prepareIcprof(ctx context.Context, c *vmCache) (string, error) {
	ver, err := hostQEMUVersion()
	if err != nil {
		return "", err
	}
	root, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "icprof", ver)
	so, src := filepath.Join(dir, "icprof.so"), filepath.Join(dir, "icprof.c")
	built := func() bool { return fileSame(src, icprofSource) && isFile(so) }
	if built() {
		return so, nil
	}
	if err := c.Lock(); err != nil {
		return "", err
	}
	defer c.Unlock()
	if built() { // another vm built it while this one waited
		return so, nil
	}
	// No plugin until this source's is built: a failed build must not
	// leave the new source beside the old plugin, which built would then
	// take for current.
	if err := os.Remove(so); err != nil && !os.IsNotExist(err) {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	header := filepath.Join(dir, "qemu-plugin.h")
	if !isFile(header) {
		if err := fetchPluginHeader(ctx, c, ver, dir); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(src, icprofSource, 0o644); err != nil {
		return "", err
	}
	tmp := so + ".tmp"
	if err := runIn(ctx, dir, "gcc", "-O2", "-Wall", "-shared", "-fPIC", "-I", dir, "-o", tmp, src); err != nil {
		return "", err
	}
	return so, os.Rename(tmp, so)
}

// hostQEMUVersion is the major and minor version of the installed
// qemu-system-x86_64, as "7.2" from "QEMU emulator version 7.2.22 (...)".
func hostQEMUVersion() (string, error) {
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu-system-x86_64 --version: %v", err)
	}
	m := regexp.MustCompile(`version (\d+)\.(\d+)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("qemu-system-x86_64 --version: no version in %q", firstLine(out))
	}
	return string(m[1]) + "." + string(m[2]), nil
}

// fetchPluginHeader takes include/qemu/qemu-plugin.h from the upstream
// tarball of the host suite's qemu source package whose upstream version
// matches ver (major.minor: the plugin API changes only with those).
func fetchPluginHeader(ctx context.Context, c *vmCache, ver, dir string) error {
	suite, err := hostSuite()
	if err != nil {
		return err
	}
	repo, err := newSourceRepo(c, suite)
	if err != nil {
		return err
	}
	st, err := repo.sourceStanza(ctx, "qemu")
	if err != nil {
		return err
	}
	if up := upstreamVersion(st["Version"]); up != ver && !strings.HasPrefix(up, ver+".") {
		return fmt.Errorf("the %s source package is qemu %s, the host runs %s", suite, st["Version"], ver)
	}
	name, sum, err := upstreamTarball(st)
	if err != nil {
		return err
	}
	logf("icprof: downloading %s (source package qemu %s) for its plugin header", name, st["Version"])
	tarball := filepath.Join(dir, name)
	if err := repo.downloadVerified(ctx, st["Directory"], name, sum, tarball); err != nil {
		return err
	}
	defer os.Remove(tarball)
	return runIn(ctx, dir, "tar", "-xf", tarball, "--wildcards", "--strip-components=3", "*/include/qemu/qemu-plugin.h")
}

// hostSuite is the Debian suite the host runs, from os-release.
func hostSuite() (string, error) {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
			if s := strings.Trim(v, `"`); s != "" {
				if _, ok := suiteSources(s); ok {
					return s, nil
				}
				return "", fmt.Errorf("host suite %q: not one this tool knows", s)
			}
		}
	}
	return "", fmt.Errorf("/etc/os-release names no Debian suite")
}

// upstreamVersion strips a Debian version's epoch, revision and repack
// suffix: "1:7.2+dfsg-7+deb12u18" is "7.2".
func upstreamVersion(v string) string {
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.LastIndex(v, "-"); i >= 0 {
		v = v[:i]
	}
	if i := strings.IndexAny(v, "+~"); i >= 0 {
		v = v[:i]
	}
	return v
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func fileSame(p string, data []byte) bool {
	have, err := os.ReadFile(p)
	return err == nil && bytes.Equal(have, data)
}

// A block count: the block's first instruction's address, its
// instructions, its executions.
type blockCount struct {
	addr  uint64
	insns uint64
	execs uint64
}

// readMark reads one mark file.
func readMark(r io.Reader) ([]blockCount, error) {
	var res []blockCount
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want 3 fields", n)
		}
		var b blockCount
		var err error
		if b.addr, err = strconv.ParseUint(f[0], 16, 64); err == nil {
			if b.insns, err = strconv.ParseUint(f[1], 10, 64); err == nil {
				b.execs, err = strconv.ParseUint(f[2], 10, 64)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		res = append(res, b)
	}
	return res, sc.Err()
}

// kernelHalf is where x86-64's kernel addresses begin.
const kernelHalf = 0xffff800000000000

type symbol struct {
	addr uint64
	size uint64 // 0: unknown, up to the next symbol
	name string
}

// symtab maps an address to the function that holds it: the last symbol
// at or below it, if the address is within its size.
type symtab []symbol

func (t symtab) lookup(addr uint64) string {
	i := sort.Search(len(t), func(i int) bool { return t[i].addr > addr })
	if i == 0 {
		return ""
	}
	if s := t[i-1]; s.size == 0 || addr-s.addr < s.size {
		return s.name
	}
	return ""
}

// readKallsyms reads /proc/kallsyms' text symbols.
func readKallsyms(r io.Reader) (symtab, error) {
	var t symtab
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.ContainsAny(f[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		t = append(t, symbol{addr: a, name: f[2]})
	}
	return t, sc.Err()
}

// elfFuncs reads an executable's function symbols (a static, non-PIE
// binary, such as a Go program, runs at the addresses it names).
func elfFuncs(path string) (symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var t symtab
	for _, s := range syms {
		// Size 0: a marker such as runtime.etext, not a function.
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size != 0 {
			t = append(t, symbol{s.Value, s.Size, s.Name})
		}
	}
	return t, nil
}

// function names a function of the kernel or of user space.
type function struct {
	name   string
	kernel bool
}

// perFunction sums a mark's instructions by function. Kernel blocks
// outside any symbol count as [kernel], user blocks outside the given
// executables as [user].
func perFunction(blocks []blockCount, kernel, user symtab) map[function]int64 {
	res := map[function]int64{}
	for _, b := range blocks {
		fn := function{kernel: b.addr >= kernelHalf}
		if fn.kernel {
			if fn.name = kernel.lookup(b.addr); fn.name == "" {
				fn.name = "[kernel]"
			}
		} else if fn.name = user.lookup(b.addr); fn.name == "" {
			fn.name = "[user]"
		}
		res[fn] += int64(b.insns * b.execs)
	}
	return res
}

func cmdIcprofReport(args []string) int {
	fs := flag.NewFlagSet("vm icprof report", flag.ExitOnError)
	base := fs.Int("base", -1, "subtract mark `K0`'s counts (e.g. the same run with fewer iterations)")
	per := fs.Float64("n", 1, "divide by `N` (e.g. the difference in iterations)")
	top := fs.Int("top", 40, "print this many functions, largest difference first")
	var elfs listFlag
	fs.Var(&elfs, "elf", "an executable the guest ran whose symbols name user-space blocks (repeatable; static, non-PIE)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm icprof report [flags] DIR K

Prints the instructions of mark K per function, kernel and user space,
optionally less those of mark K0 and divided by N. Mark K holds those
executed before the guest's K-th "vm mark" (counted from 0) since the one
before it; mark 0 runs from boot.
`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() != 2 || *per <= 0 {
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	k, err := strconv.Atoi(fs.Arg(1))
	if err != nil {
		fs.Usage()
		return 2
	}
	var user symtab
	for _, p := range elfs {
		t, err := elfFuncs(p)
		if err != nil {
			logf("icprof report: %v", err)
			return 1
		}
		user = append(user, t...)
	}
	if err := icprofReport(os.Stdout, dir, k, *base, *per, *top, user); err != nil {
		logf("icprof report: %v", err)
		return 1
	}
	return 0
}

// icprofReport prints mark k of dir, less mark base if base >= 0, per
// function, divided by per; user names user space's functions.
func icprofReport(w io.Writer, dir string, k, base int, per float64, top int, user symtab) error {
	var kernel symtab
	if f, err := os.Open(filepath.Join(dir, "kallsyms")); err == nil {
		kernel, err = readKallsyms(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	sort.Slice(kernel, func(i, j int) bool { return kernel[i].addr < kernel[j].addr })
	user = append(symtab(nil), user...)
	sort.Slice(user, func(i, j int) bool { return user[i].addr < user[j].addr })
	load := func(k int) (map[function]int64, error) {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("mark.%d", k)))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := readMark(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f.Name(), err)
		}
		return perFunction(b, kernel, user), nil
	}
	m, err := load(k)
	if err != nil {
		return err
	}
	if base >= 0 {
		b, err := load(base)
		if err != nil {
			return err
		}
		for fn, v := range b {
			m[fn] -= v
		}
	}
	writeReport(w, m, per, top)
	return nil
}

// writeReport prints the totals, then the functions by the size of their
// figure (positive or negative), each divided by per, after "k" for the
// kernel's or "u" for user space's.
func writeReport(w io.Writer, m map[function]int64, per float64, top int) {
	var kern, usr int64
	fns := make([]function, 0, len(m))
	for fn, v := range m {
		if v == 0 {
			continue
		}
		fns = append(fns, fn)
		if fn.kernel {
			kern += v
		} else {
			usr += v
		}
	}
	abs := func(v int64) int64 { return max(v, -v) }
	sort.Slice(fns, func(i, j int) bool {
		if a, b := abs(m[fns[i]]), abs(m[fns[j]]); a != b {
			return a > b
		}
		return fns[i].name < fns[j].name
	})
	fmt.Fprintf(w, "%12.1f   total\n%12.1f   kernel\n%12.1f   user space\n", float64(kern+usr)/per, float64(kern)/per, float64(usr)/per)
	for i, fn := range fns {
		if i == top {
			break
		}
		side := "k"
		if !fn.kernel {
			side = "u"
		}
		fmt.Fprintf(w, "%12.1f %s %s\n", float64(m[fn])/per, side, fn.name)
	}
}
