//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// indexTTL is how long a suite's resolved kernel is trusted before the apt
// index is fetched again. Debian replaces a suite's kernel every few weeks;
// within a working day repeated runs should not touch the network at all.
const indexTTL = 12 * time.Hour

// kernelInfo describes one exact Debian kernel build.
type kernelInfo struct {
	Suite    string   `json:"suite"`          // suite it was resolved from
	Arch     string   `json:"arch,omitempty"` // Debian architecture; "" is amd64
	Release  string   `json:"release"`        // uname -r, e.g. 6.1.0-41-amd64
	Version  string   `json:"version"`        // Debian package version, e.g. 6.1.158-1
	Packages []string `json:"packages"`       // name=version of the downloaded packages
}

// kernel is a complete kernel in the cache.
type kernel struct {
	kernelInfo
	dir string // <cache>/vm/kernels/<release>_<version>
}

func (k *kernel) root() string { return filepath.Join(k.dir, "root") }

// vmlinux is what QEMU boots: the ELF vmlinux on amd64 (PVH entry), the
// uncompressed Image on arm64.
func (k *kernel) vmlinux() string { return filepath.Join(k.dir, "vmlinux") }

// arch is the kernel's Debian architecture.
func (k *kernel) arch() string {
	if k.Arch == "" {
		return "amd64"
	}
	return k.Arch
}

// suiteKey names a suite's kernel of one architecture in the cache.
func suiteKey(suite, arch string) string {
	if arch == "amd64" || arch == "" {
		return suite
	}
	return suite + "-" + arch
}

// suitePointer records which kernel a suite resolved to, and when.
type suitePointer struct {
	Dir      string    `json:"dir"` // folder name under kernels/
	Resolved time.Time `json:"resolved"`
}

func cmdKernel(args []string) int {
	fs := flag.NewFlagSet("vm kernel", flag.ExitOnError)
	spec := fs.String("kernel", envOr("RDMAGO_VM_KERNEL", "bookworm"), "Debian suite (bookworm, trixie, sid) or an exact cached kernel release")
	refresh := fs.Bool("refresh", false, "fetch the suite's package index even if the cached resolution is recent")
	arch := fs.String("arch", envOr("RDMAGO_VM_ARCH", "amd64"), "guest architecture: amd64 or arm64")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vm kernel [--kernel SUITE] [--arch ARCH] [--refresh]\n\nPrepares the suite's current kernel and its initramfs in the cache and prints its release.")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}

	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return 1
	}
	k, err := prepareKernel(context.Background(), c, *spec, *arch, *refresh)
	if err != nil {
		logf("kernel: %v", err)
		return 1
	}
	bb, _, err := guestBusybox(c, k)
	if err != nil {
		logf("kernel %s: %v", k.Release, err)
		return 1
	}
	initrd, err := ensureInitramfs(c, k, bb)
	if err != nil {
		logf("kernel %s: initramfs: %v", k.Release, err)
		return 1
	}
	logf("kernel %s (Debian %s, %s): %s, %s", k.Release, k.Version, k.Suite, k.vmlinux(), initrd)
	fmt.Println(k.Release)
	return 0
}

// prepareKernel returns a complete cached kernel for spec: a suite name,
// resolved to the suite's current kernel, or the release (or folder name) of
// a kernel already in the cache.
func prepareKernel(ctx context.Context, c *vmCache, spec, arch string, refresh bool) (*kernel, error) {
	if err := checkArch(arch); err != nil {
		return nil, err
	}
	if _, ok := suiteSources(spec); !ok {
		return findCachedKernel(c, spec)
	}
	key := suiteKey(spec, arch)
	if !refresh {
		if k, fresh := currentKernel(c, key); k != nil && fresh {
			return k, nil
		}
	}

	if err := c.Lock(); err != nil {
		return nil, err
	}
	defer c.Unlock()
	cached, fresh := currentKernel(c, key)
	if !refresh && cached != nil && fresh {
		return cached, nil // another vm finished this while we waited
	}

	repo, err := newAptRepoArch(c, spec, arch)
	if err != nil {
		return nil, err
	}
	if err := repo.Update(ctx); err != nil {
		if cached != nil {
			logf("warning: cannot refresh the %s package index, using the cached kernel %s: %v", spec, cached.Release, err)
			// Offline: try again after another indexTTL, not on every run.
			return cached, setCurrentKernel(c, key, cached)
		}
		return nil, err
	}
	info, err := resolveKernel(ctx, repo)
	if err != nil {
		return nil, err
	}
	k, err := ensureKernel(ctx, c, repo, info)
	if err != nil {
		return nil, err
	}
	return k, setCurrentKernel(c, key, k)
}

// checkArch accepts the guest architectures vm can boot.
func checkArch(arch string) error {
	switch arch {
	case "amd64", "arm64":
		return nil
	}
	return fmt.Errorf("unknown architecture %q: want amd64 or arm64", arch)
}

// setCurrentKernel records k as the suite's kernel, resolved now.
func setCurrentKernel(c *vmCache, suite string, k *kernel) error {
	ptr, _ := json.Marshal(suitePointer{Dir: filepath.Base(k.dir), Resolved: time.Now()})
	if err := os.MkdirAll(c.path("suites"), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(c.path("suites", suite+".json"), ptr, 0o644)
}

// currentKernel returns the kernel the suite last resolved to, if it is
// still complete in the cache, and whether that resolution is recent.
func currentKernel(c *vmCache, suite string) (*kernel, bool) {
	data, err := os.ReadFile(c.path("suites", suite+".json"))
	if err != nil {
		return nil, false
	}
	var p suitePointer
	if json.Unmarshal(data, &p) != nil || p.Dir == "" {
		return nil, false
	}
	k, err := loadKernel(c.path("kernels", p.Dir))
	if err != nil {
		return nil, false
	}
	return k, time.Since(p.Resolved) < indexTTL
}

func loadKernel(dir string) (*kernel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		return nil, err
	}
	k := &kernel{dir: dir}
	if err := json.Unmarshal(data, &k.kernelInfo); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return k, nil
}

// findCachedKernel looks a kernel up by release or folder name; the newest
// matching folder wins when one release was built twice.
func findCachedKernel(c *vmCache, spec string) (*kernel, error) {
	dirs, _ := filepath.Glob(c.path("kernels", "*", "info.json"))
	var found *kernel
	var foundTime time.Time
	var have []string
	for _, f := range dirs {
		k, err := loadKernel(filepath.Dir(f))
		if err != nil {
			continue
		}
		have = append(have, k.Release)
		if k.Release != spec && filepath.Base(k.dir) != spec {
			continue
		}
		if st, err := os.Stat(f); err == nil && (found == nil || st.ModTime().After(foundTime)) {
			found, foundTime = k, st.ModTime()
		}
	}
	if found == nil {
		sort.Strings(have)
		return nil, fmt.Errorf("unknown kernel %q: want bookworm, trixie, sid or a cached release (cached: %s)", spec, strings.Join(have, ", "))
	}
	return found, nil
}

// resolveKernel finds the suite's current kernel: the linux-image-<release>
// that the linux-image-amd64 metapackage depends on, and the packages that
// carry its bzImage and modules. Debian has shipped three layouts:
// linux-image-<release>-unsigned (bookworm, trixie); linux-binary-<release>
// plus linux-modules-<release> behind an empty linux-image-<release> (sid
// since 7.x); and the signed linux-image-<release> itself, used as a last
// resort (its EFI signature is irrelevant to QEMU).
func resolveKernel(ctx context.Context, repo *aptRepo) (kernelInfo, error) {
	metaName := "linux-image-" + repo.arch
	meta, err := repo.Show(ctx, metaName)
	if err != nil {
		return kernelInfo{}, err
	}
	st, ok := meta[metaName]
	if !ok {
		return kernelInfo{}, fmt.Errorf("%s: no %s in the package index", repo.suite, metaName)
	}
	release := ""
	for _, d := range depNames(st["Depends"]) {
		if r, ok := strings.CutPrefix(d, "linux-image-"); ok && d != metaName {
			release = r
			break
		}
	}
	if release == "" {
		return kernelInfo{}, fmt.Errorf("%s: %s %s depends on no linux-image-<release> (Depends: %s)", repo.suite, metaName, st["Version"], st["Depends"])
	}

	unsigned, image := "linux-image-"+release+"-unsigned", "linux-image-"+release
	binary, modules, base := "linux-binary-"+release, "linux-modules-"+release, "linux-base-"+release
	cands, err := repo.Show(ctx, unsigned, image, binary, modules, base)
	if err != nil {
		return kernelInfo{}, err
	}
	var pkgs []string
	switch {
	case cands[unsigned] != nil:
		pkgs = []string{unsigned}
	case cands[binary] != nil && cands[modules] != nil:
		pkgs = []string{binary, modules}
		// linux-base-<release> has modules.builtin: without it modprobe
		// cannot tell a built-in driver (virtio_pci) from a missing one.
		if cands[base] != nil {
			pkgs = append(pkgs, base)
		}
	case cands[image] != nil:
		pkgs = []string{image}
	default:
		return kernelInfo{}, fmt.Errorf("%s: no package carries kernel %s (looked for %s, %s+%s, %s)", repo.suite, release, unsigned, binary, modules, image)
	}
	info := kernelInfo{Suite: repo.suite, Release: release, Version: cands[pkgs[0]]["Version"]}
	if repo.arch != "amd64" {
		info.Arch = repo.arch
	}
	for _, p := range pkgs {
		info.Packages = append(info.Packages, p+"="+cands[p]["Version"])
	}
	return info, nil
}

// ensureKernel downloads, unpacks and prepares a kernel unless the cache
// already has it. Each step builds in a temporary name and renames, and
// info.json is written last, so an interrupted run leaves nothing that looks
// complete. The caller holds the cache lock.
func ensureKernel(ctx context.Context, c *vmCache, repo *aptRepo, info kernelInfo) (*kernel, error) {
	dir := c.path("kernels", info.Release+"_"+strings.ReplaceAll(info.Version, ":", "%3a"))
	if k, err := loadKernel(dir); err == nil {
		if slices.Equal(k.Packages, info.Packages) {
			return k, nil
		}
		// Built by an older vm from other packages: start over.
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	k := &kernel{kernelInfo: info, dir: dir}
	start := time.Now()

	if err := ensureTree(ctx, repo, k); err != nil {
		return nil, err
	}
	vmlinuz, err := findVmlinuz(k.root(), info.Release)
	if err != nil {
		return nil, err
	}
	bz, err := os.ReadFile(vmlinuz)
	if err != nil {
		return nil, err
	}
	extract := extractVmlinux
	if k.arch() == "arm64" {
		extract = extractArm64Image
	}
	elf, format, err := extract(bz)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", vmlinuz, err)
	}
	if err := writeFileAtomic(k.vmlinux(), elf, 0o644); err != nil {
		return nil, err
	}

	data, _ := json.MarshalIndent(info, "", "  ")
	if err := writeFileAtomic(filepath.Join(dir, "info.json"), data, 0o644); err != nil {
		return nil, err
	}
	logf("kernel %s: ready in %.1fs (vmlinux %d MB, from %s bzImage)", info.Release, time.Since(start).Seconds(), len(elf)>>20, format)
	return k, nil
}

// ensureTree downloads and unpacks the kernel's packages unless its tree is
// there. Once vmlinux and the initramfs exist only a new initramfs needs the
// tree, so debs/ and root/ may be deleted to save space (a CI cache need not
// keep them); they come back here on demand. The caller holds the cache lock.
func ensureTree(ctx context.Context, repo *aptRepo, k *kernel) error {
	if isDir(k.root()) {
		return nil
	}
	debs := filepath.Join(k.dir, "debs")
	if !isDir(debs) {
		logf("kernel %s: downloading %s", k.Release, strings.Join(k.Packages, " "))
		tmp := debs + ".tmp"
		os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		if err := repo.Download(ctx, tmp, k.Packages...); err != nil {
			// The index may be missing or stale (a restored cache).
			if repo.Update(ctx) != nil || repo.Download(ctx, tmp, k.Packages...) != nil {
				return err
			}
		}
		if err := os.Rename(tmp, debs); err != nil {
			return err
		}
	}
	return unpackKernel(ctx, debs, k.root(), k.Release)
}

// unpackKernel unpacks every .deb in debs into root, makes the module tree
// reachable under both lib/modules and usr/lib/modules, and runs depmod
// (Debian's packages ship no modules.dep; it is made at install time).
func unpackKernel(ctx context.Context, debs, root, release string) error {
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	files, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	if len(files) == 0 {
		return fmt.Errorf("no .deb files in %s", debs)
	}
	if err := unpackDebs(ctx, files, tmp); err != nil {
		return err
	}
	if err := linkModuleDirs(tmp, release); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "depmod", "-b", tmp, release).CombinedOutput(); err != nil {
		return fmt.Errorf("depmod -b %s %s: %v\n%s", tmp, release, err, out)
	}
	return os.Rename(tmp, root)
}

// linkModuleDirs makes <root>/lib/modules and <root>/usr/lib/modules the same
// folder. Packages before the merged-/usr move ship lib/modules, sid's ship
// usr/lib/modules; kmod 30 (bookworm) only looks in lib/modules below -b/-d,
// newer kmod builds may look in usr/lib/modules.
func linkModuleDirs(root, release string) error {
	lib := filepath.Join(root, "lib", "modules")
	usr := filepath.Join(root, "usr", "lib", "modules")
	hasLib := isDir(filepath.Join(lib, release))
	hasUsr := isDir(filepath.Join(usr, release))
	switch {
	case hasLib && hasUsr:
		return nil
	case hasUsr:
		if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
			return err
		}
		return os.Symlink("../usr/lib/modules", lib)
	case hasLib:
		if err := os.MkdirAll(filepath.Dir(usr), 0o755); err != nil {
			return err
		}
		return os.Symlink("../../lib/modules", usr)
	}
	return fmt.Errorf("the kernel packages contain no modules for %s (neither lib/modules nor usr/lib/modules)", release)
}

func findVmlinuz(root, release string) (string, error) {
	for _, p := range []string{
		"boot/vmlinuz-" + release,
		"usr/lib/modules/" + release + "/vmlinuz",
		"lib/modules/" + release + "/vmlinuz",
	} {
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.Mode().IsRegular() {
			return filepath.Join(root, p), nil
		}
	}
	return "", errors.New("the kernel packages contain no vmlinuz for " + release)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
