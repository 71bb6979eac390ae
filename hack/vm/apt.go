//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// aptRepo is a private apt configuration for one Debian suite: its own
// sources.list, package lists and caches under the vm cache. The host's apt
// sources, lists and pinning are never read or written, so this works the
// same on a bookworm CI runner as on a developer's trixie laptop, and it
// cannot disturb the host's package management.
type aptRepo struct {
	suite string
	arch  string // Debian architecture: amd64 (the host's) or arm64
	dir   string // <cache>/vm/apt/<suite>, or <suite>-<arch> for a foreign one
}

const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// suiteSources lists the archive lines of each supported suite. Stable
// suites take their kernels from -security as well: between point releases
// the current kernel of a stable suite is published there, and only there.
func suiteSources(suite string) ([]string, bool) {
	mirror := envOr("RDMAGO_DEBIAN_MIRROR", "http://deb.debian.org/debian")
	security := envOr("RDMAGO_DEBIAN_SECURITY", "http://deb.debian.org/debian-security")
	switch suite {
	case "bookworm", "trixie":
		return []string{
			mirror + " " + suite + " main",
			security + " " + suite + "-security main",
		}, true
	case "sid":
		return []string{mirror + " sid main"}, true
	}
	return nil, false
}

func newAptRepo(c *vmCache, suite string) (*aptRepo, error) {
	return newAptRepoArch(c, suite, "amd64")
}

// newAptRepoArch is newAptRepo for the packages of one architecture: arm64
// gets a private index of its own, whose downloads are arm64 packages,
// whatever the host's dpkg architectures are.
func newAptRepoArch(c *vmCache, suite, arch string) (*aptRepo, error) {
	lines, ok := suiteSources(suite)
	if !ok {
		return nil, fmt.Errorf("unknown suite %q", suite)
	}
	r := &aptRepo{suite: suite, arch: arch, dir: c.path("apt", suiteKey(suite, arch))}
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	// target=Packages: only the package index is needed; this skips the
	// translations and AppStream metadata the host's apt.conf.d may enable
	// (about a third of the download for sid).
	var src bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&src, "deb [target=Packages signed-by=%s] %s\n", debianKeyring, l)
	}
	if err := writeFileAtomic(r.sourcesList(), src.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *aptRepo) sourcesList() string { return filepath.Join(r.dir, "sources.list") }

// options points apt at the private files. apt's binary caches are turned
// off: they would take 100 MB per suite to save about a second per
// resolution, which happens at most every indexTTL.
func (r *aptRepo) options() []string {
	opts := []string{
		"Dir::Etc::sourcelist=" + r.sourcesList(),
		"Dir::Etc::sourceparts=/dev/null",
		"Dir::Etc::preferences=/dev/null",
		"Dir::Etc::preferencesparts=/dev/null",
		"Dir::State::Lists=" + filepath.Join(r.dir, "lists"),
		"Dir::Cache=" + filepath.Join(r.dir, "cache"),
		"Dir::Cache::pkgcache=",
		"Dir::Cache::srcpkgcache=",
		"Acquire::Languages=none",
	}
	if r.arch != "amd64" {
		opts = append(opts, "APT::Architecture="+r.arch, "APT::Architectures="+r.arch)
	}
	if os.Geteuid() == 0 {
		// As root apt downloads as the _apt user, which may not be able to
		// reach a cache inside a home folder; the files are public anyway.
		opts = append(opts, "APT::Sandbox::User=root")
	}
	var args []string
	for _, o := range opts {
		args = append(args, "-o", o)
	}
	return args
}

func (r *aptRepo) run(ctx context.Context, dir, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, append(r.options(), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		return out, fmt.Errorf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, msg)
	}
	// apt-get update reports failed fetches as warnings with status 0.
	if bytes.Contains(stderr.Bytes(), []byte("Failed to fetch")) {
		return out, fmt.Errorf("%s %s:\n%s", tool, strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Update downloads the suite's current package index.
func (r *aptRepo) Update(ctx context.Context) error {
	_, err := r.run(ctx, r.dir, "apt-get", "-q", "update")
	return err
}

// Show returns the candidate stanza of each named package that exists;
// packages the index does not know are simply absent from the result.
func (r *aptRepo) Show(ctx context.Context, pkgs ...string) (map[string]map[string]string, error) {
	out, err := r.run(ctx, r.dir, "apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...)
	res := parseStanzas(out)
	if err != nil && len(res) == 0 {
		// apt-cache exits non-zero when none of the packages exist:
		// that is an empty answer, not a failure.
		if strings.Contains(err.Error(), "No packages found") || strings.Contains(err.Error(), "Unable to locate") {
			return res, nil
		}
		return nil, err
	}
	return res, nil
}

// Download fetches the exact package versions (name=version) into dir.
func (r *aptRepo) Download(ctx context.Context, dir string, pkgvers ...string) error {
	_, err := r.run(ctx, dir, "apt-get", append([]string{"-q", "download"}, pkgvers...)...)
	return err
}

// parseStanzas parses deb822 paragraphs keyed by their Package field.
// Continuation lines are folded into the previous field's value.
func parseStanzas(data []byte) map[string]map[string]string {
	res := map[string]map[string]string{}
	cur := map[string]string{}
	last := ""
	flush := func() {
		if p := cur["Package"]; p != "" {
			if _, dup := res[p]; !dup {
				res[p] = cur
			}
		}
		cur, last = map[string]string{}, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += "\n" + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = k
				cur[k] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return res
}

// depNames returns the package names of a Depends field, ignoring version
// constraints and taking the first choice of each alternative.
func depNames(field string) []string {
	var names []string
	for _, dep := range strings.Split(field, ",") {
		alt := strings.TrimSpace(strings.Split(dep, "|")[0])
		if name, _, _ := strings.Cut(alt, " "); name != "" {
			names = append(names, strings.SplitN(name, ":", 2)[0])
		}
	}
	return names
}

// packageClosure returns the stanzas of roots and of the libraries they
// need: the closure of Depends and Pre-Depends, following only library
// packages, which Debian marks Multi-Arch: same. The others are for
// installing, not for running: libibverbs1 depends on adduser (trixie) or
// systemd-sysusers (sid) to create the rdma group, and sid's choice would
// pull in systemd. Every root must exist.
func packageClosure(ctx context.Context, repo *aptRepo, roots []string) (map[string]map[string]string, error) {
	seen := map[string]map[string]string{}
	todo := slices.Clone(roots)
	for len(todo) > 0 {
		got, err := repo.Show(ctx, todo...)
		if err != nil {
			return nil, err
		}
		var next []string
		for _, p := range todo {
			st, ok := got[p]
			root := slices.Contains(roots, p)
			if !ok {
				if root {
					return nil, fmt.Errorf("%s: no package %s in the package index", repo.suite, p)
				}
				continue // a virtual package: its providers are among the rest
			}
			if seen[p] != nil || !root && st["Multi-Arch"] != "same" {
				continue
			}
			seen[p] = st
			for _, d := range depNames(st["Depends"] + ", " + st["Pre-Depends"]) {
				if seen[d] == nil && !slices.Contains(next, d) {
					next = append(next, d)
				}
			}
		}
		todo = next
	}
	return seen, nil
}

// unpackDebs unpacks each .deb into root with dpkg-deb -x: the packages'
// files, without running their maintainer scripts.
func unpackDebs(ctx context.Context, files []string, root string) error {
	for _, f := range files {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", f, root).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %v\n%s", f, err, out)
		}
	}
	return nil
}

// pinned lists packages as name=version, sorted, for apt-get download.
func pinned(stanzas map[string]map[string]string) []string {
	var pkgs []string
	for p, st := range stanzas {
		pkgs = append(pkgs, p+"="+st["Version"])
	}
	sort.Strings(pkgs)
	return pkgs
}
