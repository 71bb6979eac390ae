//go:build linux

package main

// The root of a guest whose architecture is not the host's. The guest of
// vm run sees the host's root file system; an arm64 guest cannot run its
// programs. It gets the host's tree all the same (the test binaries, the
// working directory), with an arm64 layer over it: the arm64 packages
// below, unpacked from Debian's archive into the cache (never installed on
// the host), shadow the host's programs and libraries of the same names,
// so that /bin/sh, the rdma-core tools and their libraries are arm64 ones.
//
// Cache layout (under <cache>/vm/archroot/<suite>-<arch>/):
//
//	debs/      the downloaded .deb files
//	root/      the packages unpacked with dpkg-deb -x, merged-/usr
//	info.json  what this is and when it was resolved; written last

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// archRootPackages are the packages of the foreign guest's root, with
// their libraries (packageClosure): a shell, the static busybox the
// initramfs runs, the rdma-core tools the interop tests run as peers,
// iproute2's ip and rdma, curl for the rsocket preload test, and
// coreutils for stdbuf (tooltest.LineBuffered).
var archRootPackages = []string{
	"dash", "busybox-static", "libc6",
	"libibverbs1", "ibverbs-providers", "librdmacm1",
	"ibverbs-utils", "rdmacm-utils", "perftest",
	"iproute2", "curl", "coreutils",
}

// busyboxApplets are the other programs tests run, served by busybox.
var busyboxApplets = []string{"dmesg", "uname", "sleep", "cat", "ls"}

type archRootInfo struct {
	Suite string `json:"suite"`
	Arch  string `json:"arch"`
	// Wanted is archRootPackages when the root was made: a root made
	// for another list is made again at once, not when its index ages.
	Wanted   []string  `json:"wanted"`
	Packages []string  `json:"packages"`
	Resolved time.Time `json:"resolved"`
}

// current reports whether a cached root was made for archRootPackages.
func (r *archRoot) current() bool {
	return r != nil && slices.Equal(r.Wanted, archRootPackages)
}

// fresh reports whether a cached root can be used without reading the
// package index.
func (r *archRoot) fresh() bool {
	return r.current() && time.Since(r.Resolved) < indexTTL
}

type archRoot struct {
	archRootInfo
	dir string
}

func (r *archRoot) root() string { return filepath.Join(r.dir, "root") }

// busybox is the root's static busybox, the initramfs's only program.
func (r *archRoot) busybox() string { return filepath.Join(r.root(), "usr/bin/busybox") }

// prepareArchRoot returns the suite's root for arch, building it when the
// cache lacks it or the suite's packages have moved on. The kernel of the
// same suite and arch is prepared first, so the package index is fresh.
func prepareArchRoot(ctx context.Context, c *vmCache, suite, arch string) (*archRoot, error) {
	r, err := prepareArchRootPackages(ctx, c, suite, arch)
	if err != nil {
		return nil, err
	}
	// Made on every run, so that a change to the list needs no rebuild.
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(r.root(), "usr/bin", a)); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	return r, nil
}

func prepareArchRootPackages(ctx context.Context, c *vmCache, suite, arch string) (*archRoot, error) {
	dir := c.path("archroot", suite+"-"+arch)
	have, _ := loadArchRoot(dir)
	if have.fresh() {
		return have, nil
	}
	if err := c.Lock(); err != nil {
		return nil, err
	}
	defer c.Unlock()
	have, _ = loadArchRoot(dir)
	if have.fresh() {
		return have, nil
	}
	repo, err := newAptRepoArch(c, suite, arch)
	if err != nil {
		return nil, err
	}
	stanzas, err := packageClosure(ctx, repo, archRootPackages)
	if err != nil {
		// A restored cache may lack the index.
		if repo.Update(ctx) != nil {
			if have.current() {
				logf("warning: cannot read the %s %s package index, using the cached root: %v", suite, arch, err)
				return have, nil
			}
			return nil, err
		}
		if stanzas, err = packageClosure(ctx, repo, archRootPackages); err != nil {
			return nil, err
		}
	}
	info := archRootInfo{Suite: suite, Arch: arch, Wanted: archRootPackages, Packages: pinned(stanzas), Resolved: time.Now()}
	if have.current() && slices.Equal(have.Packages, info.Packages) {
		have.Resolved = info.Resolved
		return have, writeJSON(filepath.Join(dir, "info.json"), have.archRootInfo)
	}
	return buildArchRoot(ctx, repo, dir, info)
}

func loadArchRoot(dir string) (*archRoot, error) {
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		return nil, err
	}
	r := &archRoot{dir: dir}
	if err := json.Unmarshal(data, &r.archRootInfo); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return r, nil
}

func writeJSON(path string, v any) error {
	data, _ := json.MarshalIndent(v, "", "  ")
	return writeFileAtomic(path, data, 0o644)
}

// buildArchRoot downloads and unpacks info's packages into dir. The caller
// holds the lock.
func buildArchRoot(ctx context.Context, repo *aptRepo, dir string, info archRootInfo) (*archRoot, error) {
	start := time.Now()
	os.Remove(filepath.Join(dir, "info.json"))
	for _, d := range []string{"debs", "root"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return nil, err
		}
	}
	r := &archRoot{archRootInfo: info, dir: dir}
	debs := filepath.Join(dir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	logf("archroot %s-%s: downloading %d packages", info.Suite, info.Arch, len(info.Packages))
	if err := repo.Download(ctx, debs, info.Packages...); err != nil {
		return nil, err
	}
	files, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err := unpackDebs(ctx, files, r.root()); err != nil {
		return nil, err
	}
	if err := mergeUsr(r.root()); err != nil {
		return nil, err
	}
	// Maintainer scripts do not run: dash's would make /bin/sh.
	if err := os.Symlink("dash", filepath.Join(r.root(), "usr/bin/sh")); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if _, err := os.Stat(r.busybox()); err != nil {
		return nil, fmt.Errorf("archroot: no busybox: %v", err)
	}
	if err := writeJSON(filepath.Join(dir, "info.json"), info); err != nil {
		return nil, err
	}
	logf("archroot %s-%s: ready in %.1fs (%d packages)", info.Suite, info.Arch, time.Since(start).Seconds(), len(files))
	return r, nil
}

// mergeUsr moves bin, sbin and lib under usr and links them there, as a
// merged-/usr system is laid out: overlaid on the host's root, whose /bin
// is such a link, the layer then shadows the host's files of the same
// names instead of hiding the host's /bin as a whole.
func mergeUsr(root string) error {
	for _, d := range []string{"bin", "sbin", "lib"} {
		top, usr := filepath.Join(root, d), filepath.Join(root, "usr", d)
		if err := os.MkdirAll(usr, 0o755); err != nil {
			return err
		}
		st, err := os.Lstat(top)
		switch {
		case err == nil && st.Mode()&os.ModeSymlink != 0:
			continue
		case err == nil:
			// cp -a merges the trees; the unpacked files are ours to move.
			if out, err := exec.Command("cp", "-a", top+"/.", usr).CombinedOutput(); err != nil {
				return fmt.Errorf("cp -a %s %s: %v: %s", top, usr, err, strings.TrimSpace(string(out)))
			}
			if err := os.RemoveAll(top); err != nil {
				return err
			}
		case !os.IsNotExist(err):
			return err
		}
		if err := os.Symlink("usr/"+d, top); err != nil {
			return err
		}
	}
	return nil
}
