//go:build linux

package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// guestModules are the modules the guest loads, by name; their dependencies
// are resolved per kernel with modprobe, since they differ between releases
// (6.1 needs netfs/fscache for 9p, 7.x adds ib_uverbs_support, ...).
var guestModules = []string{
	"rdma_rxe", "ib_uverbs", "rdma_ucm", "ib_umad", // soft-RoCE and the user-space ABIs
	"9p", "9pnet_virtio", "virtio_pci", // the host's root and the I/O share
	"virtio_net", "dummy", "veth", // networks for rxe (dummy0 carries rxe0)
	"overlay", // the writable layer over the read-only host root
}

// optionalGuestModules are loaded when the kernel has them. rxe up to 6.x
// computes its ICRC through the crypto API's "crc32", which it requests at
// run time, not as a module dependency (no modprobe in the guest to answer);
// ib_uverbs_support appeared in 7.x.
var optionalGuestModules = []string{"crc32_generic", "ib_uverbs_support"}

// initScript is the guest's /init (PID 1); see init.sh.
//
//go:embed init.sh
var initScript []byte

// initramfsFormat is part of the initramfs's cache key: bump it when
// buildInitramfs changes what it writes.
const initramfsFormat = 1

// busyboxPath is the static busybox from busybox-static. It is the only
// program in the initramfs: everything else runs from the host's root once
// it is mounted. A foreign guest's comes from its archroot.
const busyboxPath = "/bin/busybox"

// ensureInitramfs returns the kernel's initramfs, building it when missing.
// Its name carries a hash of everything that goes into it (module list, init
// script, busybox), so a change to any of them builds a new one and an
// unchanged one is reused across runs.
func ensureInitramfs(c *vmCache, k *kernel, busybox string) (string, error) {
	bb, err := readStaticBusybox(busybox)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "format=%d modules=%q optional=%q\n", initramfsFormat, guestModules, optionalGuestModules)
	h.Write(initScript)
	h.Write(bb)
	path := filepath.Join(k.dir, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:12]+".cpio.gz")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}

	if err := c.Lock(); err != nil {
		return "", err
	}
	defer c.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if !isDir(k.root()) {
		repo, err := newAptRepoArch(c, k.Suite, k.arch())
		if err != nil {
			return "", err
		}
		if err := ensureTree(context.Background(), repo, k); err != nil {
			return "", err
		}
	}
	mods, err := resolveModules(k)
	if err != nil {
		return "", err
	}
	data, err := buildInitramfs(bb, mods)
	if err != nil {
		return "", err
	}
	// Older initramfs files stay: another checkout or build of vm sharing
	// this cache may be using one right now. They are about 2 MB each.
	if err := writeFileAtomic(path, data, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// guestBusybox returns the static busybox for k's initramfs, and the root
// layer of a foreign guest (nil for amd64, which runs the host's programs).
func guestBusybox(c *vmCache, k *kernel) (string, *archRoot, error) {
	if k.arch() == "amd64" {
		return busyboxPath, nil, nil
	}
	ar, err := prepareArchRoot(context.Background(), c, k.Suite, k.arch())
	if err != nil {
		return "", nil, fmt.Errorf("%s root: %v", k.arch(), err)
	}
	return ar.busybox(), ar, nil
}

// readStaticBusybox reads busybox and checks that it is statically linked:
// the initramfs has no libraries, so the dynamic "busybox" package (which
// replaces busybox-static when installed) would fail with a cryptic panic.
func readStaticBusybox(path string) ([]byte, error) {
	bb, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%v (install busybox-static: vm deps)", err)
	}
	f, err := elf.NewFile(bytes.NewReader(bb))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked; the guest needs busybox-static", path)
		}
	}
	return bb, nil
}

// guestModule is one module file to load, in load order.
type guestModule struct {
	path   string // in the unpacked kernel tree
	params string // module parameters from modprobe's output (normally none)
}

// resolveModules lists the module files for guestModules and their
// dependencies, dependencies first, each once. -C /dev/null keeps the host's
// modprobe.d (blacklists, options) out of it.
func resolveModules(k *kernel) ([]guestModule, error) {
	base := []string{"-d", k.root(), "-S", k.Release, "-C", "/dev/null", "--show-depends"}
	var mods []guestModule
	seen := map[string]bool{}
	add := func(out []byte) {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "insmod" || seen[f[1]] {
				continue // "builtin NAME": nothing to load
			}
			seen[f[1]] = true
			mods = append(mods, guestModule{path: f[1], params: strings.Join(f[2:], " ")})
		}
	}
	for _, m := range optionalGuestModules {
		out, err := exec.Command("modprobe", append(base, m)...).CombinedOutput()
		if err != nil {
			if bytes.Contains(out, []byte("not found")) {
				continue
			}
			return nil, fmt.Errorf("modprobe --show-depends %s: %v\n%s", m, err, out)
		}
		add(out)
	}
	out, err := exec.Command("modprobe", append(append(base, "-a"), guestModules...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("modprobe --show-depends for kernel %s: %v\n%s", k.Release, err, out)
	}
	add(out)
	return mods, nil
}

// buildInitramfs writes the gzipped cpio archive:
//
//	/init                 init.sh
//	/bin/busybox          applet links are made by /init at boot
//	/dev/console          so that /init has stdout before devtmpfs is mounted
//	/modules/order        "file params" lines in load order
//	/modules/NN-name.ko   decompressed: busybox insmod passes the bytes to
//	                      init_module(2), which takes no compressed modules
func buildInitramfs(busybox []byte, mods []guestModule) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	w := &cpioWriter{w: zw}
	for _, d := range []string{"bin", "dev", "proc", "sys", "run", "tmp", "modules", "io", "lower", "arch", "rw", "newroot"} {
		w.Dir(d)
	}
	w.CharDev("dev/console", 0o600, 5, 1)
	w.File("bin/busybox", 0o755, busybox)
	w.File("init", 0o755, initScript)

	var order strings.Builder
	for i, m := range mods {
		data, err := readModule(m.path)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%02d-%s", i, moduleBase(m.path))
		w.File("modules/"+name, 0o644, data)
		fmt.Fprintf(&order, "%s %s\n", name, m.params)
	}
	w.File("modules/order", 0o644, []byte(order.String()))
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// moduleBase is the file name without its compression suffix.
func moduleBase(path string) string {
	b := filepath.Base(path)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		b = strings.TrimSuffix(b, ext)
	}
	return b
}

func readModule(path string) ([]byte, error) {
	var tool string
	switch filepath.Ext(path) {
	case ".xz":
		tool = "xz"
	case ".zst":
		tool = "zstd"
	case ".gz":
		tool = "gzip"
	default:
		return os.ReadFile(path)
	}
	cmd := exec.Command(tool, "-dcq", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -d %s: %v: %s", tool, path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
