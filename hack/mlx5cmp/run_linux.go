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
	sp, err := loadSysfsProfile(profilePath)
	if err != nil {
		return nil, err
	}
	prof, err := fake.LoadProfile(profilePath)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mlx5cmp-sysfs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeSysfs(dir, sp); err != nil {
		return nil, fmt.Errorf("writing the fake sysfs: %w", err)
	}
	t := &transcript{}
	s := &supervisor{out: t, files: map[int]*openFile{}}
	if verbose {
		s.log = os.Stderr
	} else {
		s.log = io.Discard
	}
	s.kern = fake.New(prof, func(e fake.Event) { t.event(s.dev, e) })
	s.dev = newDevice(s.kern, t, func(f *fake.File) []byte {
		for _, of := range s.files {
			if of.f == f {
				return of.devmem
			}
		}
		return nil
	})
	err = supervise(argv, dir, s)
	return t, err
}
