//go:build linux

package main

// Cache layout (all under cacheDir()/vm):
//
//	apt/<suite>/                 private apt configuration and package index of one suite
//	suites/<suite>.json          the kernel a suite resolved to, and when (see kernel.go)
//	kernels/<release>_<debver>/  one exact kernel build:
//	    debs/                    the downloaded .deb files
//	    root/                    the unpacked packages, with depmod's output
//	    vmlinux                  uncompressed ELF kernel extracted from the bzImage
//	    info.json                what this is; written last, so its presence means complete
//	    initramfs-<hash>.cpio.gz busybox, /init and the modules (hash covers all inputs)
//	lock                         flock(2) serialising changes to the cache

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const modulePath = "github.com/rdmago/rdma"

// cacheDir returns the root of the cache: $RDMAGO_CACHE, else <repo>/.cache,
// else the user's cache folder. The repository is looked for from the working
// directory (go test -exec runs us in a package folder) and from the location
// of this executable (bin/vm), by its module path, so that a go.mod of some
// other module (a test under /tmp) does not capture the cache.
func cacheDir() (string, error) {
	if d := os.Getenv("RDMAGO_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		if root := findRepoRoot(s); root != "" {
			return filepath.Join(root, ".cache"), nil
		}
	}
	uc, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache folder: set RDMAGO_CACHE (%v)", err)
	}
	return filepath.Join(uc, "rdmago"), nil
}

// findRepoRoot walks up from dir to the folder whose go.mod declares rdmago's
// module path; it returns "" if there is none.
func findRepoRoot(dir string) string {
	for {
		if isRepoGoMod(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isRepoGoMod(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 2 && string(fields[0]) == "module" {
			return string(bytes.Trim(fields[1], `"`)) == modulePath
		}
	}
	return false
}

// vmCache is the opened cache: its root folder and, while held, the lock.
type vmCache struct {
	dir  string // <cacheDir>/vm
	lock *os.File
}

func openCache() (*vmCache, error) {
	root, err := cacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "vm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &vmCache{dir: dir}, nil
}

func (c *vmCache) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

// Lock takes the cache-wide lock. Several `vm run` may start at once (go test
// runs packages in parallel); the first one downloads and builds, the others
// wait and then find everything in place. Finished artefacts are always moved
// into place with rename, so readers of a complete kernel need no lock.
func (c *vmCache) Lock() error {
	f, err := os.OpenFile(c.path("lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cache lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("cache lock: %w", err)
	}
	c.lock = f
	return nil
}

func (c *vmCache) Unlock() {
	if c.lock != nil {
		c.lock.Close() // closing the last descriptor releases the flock
		c.lock = nil
	}
}

// writeFileAtomic writes data to path through a temporary file in the same
// folder, so that readers see either the old file or the complete new one.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
