//go:build linux && amd64

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/rdmago/rdma/hack/mlx5cmp/fake"
)

// run starts argv on the fake device described by profilePath and returns
// its transcript, which holds what was recorded even when the run failed.
func run(profilePath string, argv []string, verbose bool) (*transcript, error) {
	prof, dir, err := loadDevice(profilePath)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	t := &transcript{}
	s := &supervisor{out: t, files: map[int]*openFile{}, fab: newFabric(prof, t), log: io.Discard}
	if verbose {
		s.log = os.Stderr
	}
	err = supervise(argv, dir, s)
	return t, err
}

// loadDevice loads the device profile at profilePath and writes the fake
// sysfs it describes into a new temporary folder, which the caller
// removes.
func loadDevice(profilePath string) (*fake.Profile, string, error) {
	sp, err := loadSysfsProfile(profilePath)
	if err != nil {
		return nil, "", err
	}
	prof, err := fake.LoadProfile(profilePath)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "mlx5cmp-sysfs-")
	if err != nil {
		return nil, "", err
	}
	if err := writeSysfs(dir, sp); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("writing the fake sysfs: %w", err)
	}
	return prof, dir, nil
}
