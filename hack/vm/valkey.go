//go:build linux

package main

// valkey-server with its RDMA transport, and valkey's RDMA test client,
// built from a Debian suite's source package into the cache: the peers of
// the valkeyrdma tests. Debian's binary package is built without RDMA
// (BUILD_RDMA), so the upstream tarball of the source package is built
// here, as upstream builds it (its bundled jemalloc, lua and hiredis; the
// Debian patches, which switch those to system libraries, are not
// applied). It needs gcc, make, libibverbs-dev and librdmacm-dev, which
// `vm deps` installs.
//
// Cache layout (under cacheDir()/valkey/<release>/):
//
//	src/        the source package's upstream tarball
//	bin/        valkey-server and rdma-test
//	info.json   what this is and when it was resolved; written last

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

type valkeyInfo struct {
	Release  string    `json:"release"`  // Debian suite
	Version  string    `json:"version"`  // the source package's version
	Resolved time.Time `json:"resolved"` // when the package index last confirmed it
}

type valkeyBuild struct {
	valkeyInfo
	dir string
}

func (v *valkeyBuild) bin() string { return filepath.Join(v.dir, "bin") }

func cmdValkey(args []string) int {
	fs := flag.NewFlagSet("vm valkey", flag.ExitOnError)
	release := fs.String("release", "trixie", "Debian suite whose valkey source package to build: trixie or sid")
	refresh := fs.Bool("refresh", false, "fetch the suite's source index even if the cached resolution is recent")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm valkey [--release SUITE] [--refresh]

Downloads the suite's valkey source package, builds valkey-server with RDMA
(BUILD_RDMA=yes) and valkey's RDMA test client (tests/rdma/rdma-test) into the
cache, and prints the folder that holds the two programs. A build younger than
12 hours, or any build when the network is down, is used as it is.
`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if _, ok := suiteSources(*release); !ok || *release == "bookworm" {
		logf("valkey: unknown release %q: want trixie or sid (bookworm has no valkey)", *release)
		return 2
	}
	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return 1
	}
	v, err := prepareValkey(context.Background(), c, *release, *refresh)
	if err != nil {
		logf("valkey %s: %v", *release, err)
		return 1
	}
	fmt.Println(v.bin())
	return 0
}

// prepareValkey returns the release's build, making it when the cache
// lacks it or the suite has moved on.
func prepareValkey(ctx context.Context, c *vmCache, release string, refresh bool) (*valkeyBuild, error) {
	root, err := cacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "valkey", release)
	have, _ := loadValkey(dir)
	if have != nil && !refresh && time.Since(have.Resolved) < indexTTL {
		return have, nil
	}
	if err := c.Lock(); err != nil {
		return nil, err
	}
	defer c.Unlock()
	have, _ = loadValkey(dir)
	if have != nil && !refresh && time.Since(have.Resolved) < indexTTL {
		return have, nil
	}
	repo, err := newSourceRepo(c, release)
	if err != nil {
		return nil, err
	}
	st, err := repo.sourceStanza(ctx, "valkey")
	if err != nil {
		if have != nil {
			logf("warning: cannot refresh the %s source index, using the cached valkey %s: %v", release, have.Version, err)
			have.Resolved = time.Now()
			return have, writeValkeyInfo(have)
		}
		return nil, err
	}
	if have != nil && have.Version == st["Version"] {
		have.Resolved = time.Now()
		return have, writeValkeyInfo(have)
	}
	return buildValkey(ctx, repo, dir, st, valkeyInfo{Release: release, Version: st["Version"], Resolved: time.Now()})
}

func loadValkey(dir string) (*valkeyBuild, error) {
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		return nil, err
	}
	v := &valkeyBuild{dir: dir}
	if err := json.Unmarshal(data, &v.valkeyInfo); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	for _, p := range []string{"valkey-server", "rdma-test"} {
		if _, err := os.Stat(filepath.Join(v.bin(), p)); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func writeValkeyInfo(v *valkeyBuild) error {
	data, _ := json.MarshalIndent(v.valkeyInfo, "", "  ")
	return writeFileAtomic(filepath.Join(v.dir, "info.json"), data, 0o644)
}

// newSourceRepo is a private apt configuration for the suite's source
// packages (apt/<suite>-src), beside the binary one of newAptRepo.
func newSourceRepo(c *vmCache, suite string) (*aptRepo, error) {
	lines, ok := suiteSources(suite)
	if !ok {
		return nil, fmt.Errorf("unknown suite %q", suite)
	}
	r := &aptRepo{suite: suite, arch: "amd64", dir: c.path("apt", suite+"-src")}
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	var src strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&src, "deb-src [signed-by=%s] %s\n", debianKeyring, l)
	}
	if err := writeFileAtomic(r.sourcesList(), []byte(src.String()), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// sourceStanza updates the index and returns the candidate stanza of the
// source package: the newest of those apt-cache showsrc prints (the
// suite's and its security update's).
func (r *aptRepo) sourceStanza(ctx context.Context, pkg string) (map[string]string, error) {
	if err := r.Update(ctx); err != nil {
		return nil, err
	}
	out, err := r.run(ctx, r.dir, "apt-cache", "showsrc", "--only-source", pkg)
	if err != nil {
		return nil, err
	}
	var best map[string]string
	for _, st := range parseSourceStanzas(out) {
		if best == nil || debVersionLess(best["Version"], st["Version"]) {
			best = st
		}
	}
	if best == nil {
		return nil, fmt.Errorf("the %s source index has no %s", r.suite, pkg)
	}
	return best, nil
}

// parseSourceStanzas splits deb822 paragraphs (Package may repeat, so the
// stanzas are not keyed by it); a field's continuation lines follow its
// first line, each after a newline.
func parseSourceStanzas(data []byte) []map[string]string {
	var res []map[string]string
	for _, para := range strings.Split(string(data), "\n\n") {
		st := map[string]string{}
		key := ""
		for _, l := range strings.Split(para, "\n") {
			if strings.HasPrefix(l, " ") && key != "" {
				st[key] += "\n" + strings.TrimSpace(l)
			} else if k, v, ok := strings.Cut(l, ":"); ok {
				key = k
				st[k] = strings.TrimSpace(v)
			}
		}
		if st["Version"] != "" {
			res = append(res, st)
		}
	}
	return res
}

// upstreamTarball returns the name and SHA-256 of the stanza's upstream
// tarball.
func upstreamTarball(st map[string]string) (name, sum string, err error) {
	for _, l := range strings.Split(st["Checksums-Sha256"], "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && strings.Contains(f[2], ".orig.tar.") {
			return f[2], f[0], nil
		}
	}
	return "", "", fmt.Errorf("%s %s: no upstream tarball in Checksums-Sha256", st["Package"], st["Version"])
}

// downloadVerified fetches the file at one of the suite's mirrors into
// path and checks its SHA-256 against the (signed) index's.
func (r *aptRepo) downloadVerified(ctx context.Context, directory, name, sum, path string) error {
	lines, _ := suiteSources(r.suite)
	var errs []string
	for _, l := range lines {
		url := strings.Fields(l)[0] + "/" + directory + "/" + name
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Sprintf("%s: %s %v", url, resp.Status, err))
			continue
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != sum {
			return fmt.Errorf("%s: SHA-256 %s, the index says %s", url, got, sum)
		}
		return os.WriteFile(path, data, 0o644)
	}
	return fmt.Errorf("%s: %s", name, strings.Join(errs, "; "))
}

// debVersionLess compares two Debian versions with dpkg.
func debVersionLess(a, b string) bool {
	return exec.Command("dpkg", "--compare-versions", a, "lt", b).Run() == nil
}

// buildValkey downloads the source package and builds the two programs
// into dir, replacing what was there. The caller holds the lock.
func buildValkey(ctx context.Context, repo *aptRepo, dir string, st map[string]string, info valkeyInfo) (*valkeyBuild, error) {
	start := time.Now()
	os.Remove(filepath.Join(dir, "info.json"))
	for _, d := range []string{"src", "bin"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return nil, err
		}
	}
	v := &valkeyBuild{valkeyInfo: info, dir: dir}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(v.bin(), 0o755); err != nil {
		return nil, err
	}
	// Only the upstream tarball is fetched, checked against the signed
	// index: it is all the build uses, and a mirror may lack the
	// newest revision's Debian files while it has the tarball, which
	// revisions share.
	name, sum, err := upstreamTarball(st)
	if err != nil {
		return nil, err
	}
	logf("valkey %s: downloading %s (source package valkey %s)", info.Release, name, info.Version)
	tarball := filepath.Join(src, name)
	if err := repo.downloadVerified(ctx, st["Directory"], name, sum, tarball); err != nil {
		return nil, err
	}
	tree := filepath.Join(src, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return nil, err
	}
	if err := runIn(ctx, tree, "tar", "--strip-components=1", "-xf", tarball); err != nil {
		return nil, err
	}
	logf("valkey %s: building valkey-server with RDMA (a few minutes)", info.Release)
	jobs := fmt.Sprintf("-j%d", runtime.NumCPU())
	if err := runIn(ctx, tree, "make", jobs, "BUILD_RDMA=yes", "USE_SYSTEMD=no", "BUILD_TLS=no"); err != nil {
		return nil, err
	}
	if err := runIn(ctx, filepath.Join(tree, "tests", "rdma"), "make"); err != nil {
		return nil, err
	}
	for from, to := range map[string]string{"src/valkey-server": "valkey-server", "tests/rdma/rdma-test": "rdma-test"} {
		if err := os.Rename(filepath.Join(tree, from), filepath.Join(v.bin(), to)); err != nil {
			return nil, err
		}
	}
	// The build tree is 200 MB; the programs are all that is used.
	if err := os.RemoveAll(tree); err != nil {
		return nil, err
	}
	if err := writeValkeyInfo(v); err != nil {
		return nil, err
	}
	logf("valkey %s: valkey %s built in %.0fs", info.Release, info.Version, time.Since(start).Seconds())
	return v, nil
}

// runIn runs a build command in dir, its output kept for the error.
func runIn(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := string(out)
		if len(tail) > 4000 {
			tail = "..." + tail[len(tail)-4000:]
		}
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail)
	}
	return nil
}
