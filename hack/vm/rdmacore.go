//go:build linux

package main

// rdma-core's run-time libraries of other Debian releases, unpacked into the
// cache (never installed), so that a program built on this host against its
// own libibverbs can be run against, say, trixie's or sid's libibverbs and
// libmlx5. hack/mlx5cmp uses this to see which release a behaviour of
// rdmago's mlx5 provider matches.
//
// Cache layout (under cacheDir()/rdma-core/<release>/):
//
//	debs/          the downloaded .deb files
//	root/          the packages unpacked with dpkg-deb -x
//	libibverbs.d/  the release's provider .driver files, their names
//	               rewritten to absolute paths inside root/ (see below)
//	info.json      what this is and when it was resolved; written last
//
// Running a program against the tree needs two things besides the dynamic
// loader's library path. libibverbs reads its provider list from the
// compiled-in /etc/libibverbs.d and opens each provider from the
// compiled-in /usr/lib/x86_64-linux-gnu/libibverbs: both would reach the
// host's rdma-core, and since the provider ABI (IBVERBS_PRIVATE_34) has not
// changed for years the host's libmlx5 would load into another release's
// libibverbs without complaint. `vm rdmacore -- PROG` therefore runs PROG in
// a mount namespace of its own where /etc/libibverbs.d is the tree's
// libibverbs.d; its .driver files name absolute paths (libibverbs's
// load_driver dlopens a name starting with '/' as it is), so nothing of the
// host's rdma-core can be loaded.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rdmaCoreRoots are the packages to unpack; their library dependencies are
// added (the closure), which brings libgcc-s1 and, in sid, libc6's
// libc-gconv-modules-extra.
var rdmaCoreRoots = []string{"libibverbs1", "ibverbs-providers", "libnl-3-200", "libnl-route-3-200", "libc6"}

const multiarch = "x86_64-linux-gnu"

// rdmaCoreInfo describes one release's unpacked rdma-core.
type rdmaCoreInfo struct {
	Release  string    `json:"release"`  // Debian suite
	Version  string    `json:"version"`  // libibverbs1's Debian version, e.g. 56.1-1
	Packages []string  `json:"packages"` // name=version of the unpacked packages
	Resolved time.Time `json:"resolved"` // when the package index last confirmed them
}

// rdmaCore is a complete tree in the cache.
type rdmaCore struct {
	rdmaCoreInfo
	dir string
}

func (r *rdmaCore) root() string      { return filepath.Join(r.dir, "root") }
func (r *rdmaCore) driverDir() string { return filepath.Join(r.dir, "libibverbs.d") }

// libDirs are the tree's library folders, /usr first: bookworm's and
// trixie's libc6 still ship /lib/x86_64-linux-gnu, sid's ships everything
// under /usr (Debian's merged-/usr move, DEP 17).
func (r *rdmaCore) libDirs() []string {
	var dirs []string
	for _, d := range []string{"usr/lib/" + multiarch, "lib/" + multiarch} {
		if p := filepath.Join(r.root(), d); isDir(p) {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// loader returns the tree's dynamic loader. lib64/ld-linux-x86-64.so.2 is
// an absolute symbolic link in every release (it would reach the host's
// loader), so the file itself is looked for in the library folders.
func (r *rdmaCore) loader() (string, error) {
	for _, d := range r.libDirs() {
		p := filepath.Join(d, "ld-linux-x86-64.so.2")
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no ld-linux-x86-64.so.2 in %s", r.Release, strings.Join(r.libDirs(), ", "))
}

// command returns the argv that runs prog under the tree's loader and
// libraries.
func (r *rdmaCore) command(prog string, args []string) ([]string, error) {
	ld, err := r.loader()
	if err != nil {
		return nil, err
	}
	return append([]string{ld, "--library-path", strings.Join(r.libDirs(), ":"), prog}, args...), nil
}

func cmdRDMACore(args []string) int {
	fs := flag.NewFlagSet("vm rdmacore", flag.ExitOnError)
	release := fs.String("release", "trixie", "Debian suite: bookworm, trixie or sid")
	refresh := fs.Bool("refresh", false, "fetch the suite's package index even if the cached resolution is recent")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm rdmacore [--release SUITE] [--refresh]
       vm rdmacore [--release SUITE] -- PROGRAM [ARG...]

Downloads and unpacks the suite's libibverbs, its providers and their run-time
dependencies into the cache (not onto the host), and prints the folder.
With a PROGRAM, runs it under the suite's dynamic loader and libraries, in a
mount namespace where /etc/libibverbs.d names only the suite's providers (root,
or CAP_SYS_ADMIN in the current user namespace, as under hack/mlx5cmp); an
already unpacked tree is then used as it is, without network.
`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if _, ok := suiteSources(*release); !ok {
		logf("rdmacore: unknown release %q: want bookworm, trixie or sid", *release)
		return 2
	}
	argv := fs.Args()

	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return 1
	}
	r, err := prepareRDMACore(context.Background(), c, *release, *refresh, len(argv) > 0)
	if err != nil {
		logf("rdmacore %s: %v", *release, err)
		return 1
	}
	if len(argv) == 0 {
		logf("rdmacore %s: rdma-core %s (%d packages)", r.Release, r.Version, len(r.Packages))
		fmt.Println(r.dir)
		return 0
	}
	err = r.exec(argv)
	logf("rdmacore %s: %v", *release, err)
	return exitVMError
}

// prepareRDMACore returns the release's complete tree, downloading and
// unpacking it when the cache lacks it or the suite has moved on. A tree
// younger than indexTTL is used without network; so is any complete tree
// when cached is set.
func prepareRDMACore(ctx context.Context, c *vmCache, release string, refresh, cached bool) (*rdmaCore, error) {
	root, err := cacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "rdma-core", release)
	have, _ := loadRDMACore(dir)
	if have != nil && !refresh && (cached || time.Since(have.Resolved) < indexTTL) {
		return have, nil
	}

	// The apt index is the one kernels use (apt/<suite>), hence the
	// vm cache's lock.
	if err := c.Lock(); err != nil {
		return nil, err
	}
	defer c.Unlock()
	have, _ = loadRDMACore(dir)
	if have != nil && !refresh && (cached || time.Since(have.Resolved) < indexTTL) {
		return have, nil // another vm finished this while we waited
	}
	repo, err := newAptRepo(c, release)
	if err != nil {
		return nil, err
	}
	if err := repo.Update(ctx); err != nil {
		if have != nil {
			logf("warning: cannot refresh the %s package index, using the cached rdma-core %s: %v", release, have.Version, err)
			have.Resolved = time.Now() // offline: try again after another indexTTL
			return have, writeRDMACoreInfo(have)
		}
		return nil, err
	}
	info, err := resolveRDMACore(ctx, repo)
	if err != nil {
		return nil, err
	}
	if have != nil && slices.Equal(have.Packages, info.Packages) {
		have.Resolved = info.Resolved
		return have, writeRDMACoreInfo(have)
	}
	return buildRDMACore(ctx, repo, dir, info)
}

func loadRDMACore(dir string) (*rdmaCore, error) {
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		return nil, err
	}
	r := &rdmaCore{dir: dir}
	if err := json.Unmarshal(data, &r.rdmaCoreInfo); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return r, nil
}

func writeRDMACoreInfo(r *rdmaCore) error {
	data, _ := json.MarshalIndent(r.rdmaCoreInfo, "", "  ")
	return writeFileAtomic(filepath.Join(r.dir, "info.json"), data, 0o644)
}

// resolveRDMACore finds the packages to unpack: rdmaCoreRoots and the
// closure of their dependencies, following only library packages, which
// Debian marks Multi-Arch: same. The others are for installing, not for
// running: libibverbs1 depends on adduser (trixie) or systemd-sysusers
// (sid) to create the rdma group, and sid's choice would pull in systemd.
func resolveRDMACore(ctx context.Context, repo *aptRepo) (rdmaCoreInfo, error) {
	seen, err := packageClosure(ctx, repo, rdmaCoreRoots)
	if err != nil {
		return rdmaCoreInfo{}, err
	}
	info := rdmaCoreInfo{Release: repo.suite, Version: seen["libibverbs1"]["Version"], Resolved: time.Now()}
	info.Packages = pinned(seen)
	return info, nil
}

// buildRDMACore downloads and unpacks info's packages into dir, replacing
// what was there, and checks that the result is self-contained. info.json
// is written last: its presence means complete. The caller holds the lock.
func buildRDMACore(ctx context.Context, repo *aptRepo, dir string, info rdmaCoreInfo) (*rdmaCore, error) {
	start := time.Now()
	// An older tree goes first: its info.json before anything else, so an
	// interruption cannot leave it looking complete over new files.
	os.Remove(filepath.Join(dir, "info.json"))
	for _, d := range []string{"debs", "root", "libibverbs.d"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return nil, err
		}
	}
	r := &rdmaCore{rdmaCoreInfo: info, dir: dir}
	debs := filepath.Join(dir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	logf("rdmacore %s: downloading %s", info.Release, strings.Join(info.Packages, " "))
	if err := repo.Download(ctx, debs, info.Packages...); err != nil {
		return nil, err
	}
	files, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	if err := unpackDebs(ctx, files, r.root()); err != nil {
		return nil, err
	}
	if err := r.writeDrivers(); err != nil {
		return nil, err
	}
	if err := r.checkClosed(ctx); err != nil {
		return nil, err
	}
	if err := writeRDMACoreInfo(r); err != nil {
		return nil, err
	}
	logf("rdmacore %s: rdma-core %s ready in %.1fs (%d packages, %.1f MB of .deb)", info.Release, info.Version, time.Since(start).Seconds(), len(files), float64(size)/1e6)
	return r, nil
}

// writeDrivers writes libibverbs.d: each of the release's .driver files
// with its provider named by absolute path inside the tree.
func (r *rdmaCore) writeDrivers() error {
	provDir := ""
	for _, d := range r.libDirs() {
		if isDir(filepath.Join(d, "libibverbs")) {
			provDir = filepath.Join(d, "libibverbs")
			break
		}
	}
	confs, _ := filepath.Glob(filepath.Join(r.root(), "etc", "libibverbs.d", "*.driver"))
	if provDir == "" || len(confs) == 0 {
		return fmt.Errorf("%s: ibverbs-providers unpacked no providers or no etc/libibverbs.d", r.Release)
	}
	if err := os.MkdirAll(r.driverDir(), 0o755); err != nil {
		return err
	}
	found := false
	for _, conf := range confs {
		data, err := os.ReadFile(conf)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "driver" && !strings.HasPrefix(f[1], "/") {
				fmt.Fprintf(&out, "driver %s\n", filepath.Join(provDir, "lib"+f[1]))
				found = found || f[1] == "mlx5"
				continue
			}
			out.WriteString(sc.Text() + "\n")
		}
		if err := os.WriteFile(filepath.Join(r.driverDir(), filepath.Base(conf)), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("%s: no driver mlx5 in etc/libibverbs.d", r.Release)
	}
	return nil
}

// checkClosed asks the tree's loader to resolve libibverbs and libmlx5 (what
// ldd does) and fails if a library is missing or would come from the host:
// then a package belongs in rdmaCoreRoots.
func (r *rdmaCore) checkClosed(ctx context.Context) error {
	ld, err := r.loader()
	if err != nil {
		return err
	}
	libs := r.libDirs()
	for _, lib := range []string{"libibverbs.so.1", "libmlx5.so.1"} {
		path := filepath.Join(libs[0], lib)
		out, err := exec.CommandContext(ctx, ld, "--library-path", strings.Join(libs, ":"), "--list", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s --list %s: %v\n%s", ld, path, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			_, to, ok := strings.Cut(l, "=>")
			if !ok {
				continue
			}
			to = strings.TrimSpace(to)
			if strings.HasPrefix(to, "not found") || !strings.HasPrefix(to, r.root()+"/") {
				return fmt.Errorf("%s: %s needs %s, which the unpacked packages do not provide", r.Release, lib, strings.TrimSpace(l))
			}
		}
	}
	return nil
}

// exec replaces vm with argv run under the tree's loader, in a mount
// namespace of its own in which /etc/libibverbs.d is the tree's. It returns
// only on failure.
func (r *rdmaCore) exec(argv []string) error {
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if prog, err = filepath.Abs(prog); err != nil {
		return err
	}
	cmd, err := r.command(prog, argv[1:])
	if err != nil {
		return err
	}
	// A mount namespace belongs to a thread until it execs: this one
	// must be the thread that does.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %w (needs root, or CAP_SYS_ADMIN in the user namespace)", err)
	}
	// Without this the bind below would propagate to the host's namespace
	// when / is a shared mount (systemd's default).
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := unix.Mount(r.driverDir(), "/etc/libibverbs.d", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on /etc/libibverbs.d: %w (libibverbs's provider list is compiled in; the host must have the folder)", r.driverDir(), err)
	}
	return unix.Exec(cmd[0], cmd, os.Environ())
}
