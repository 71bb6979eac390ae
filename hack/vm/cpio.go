//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format, the one the
// kernel unpacks into its initial rootfs: a 110-byte ASCII header of 13
// eight-digit hex fields, the NUL-terminated name, padding to 4 bytes, the
// data, padding to 4 bytes; and a final TRAILER!!! entry.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rmajor, rminor uint32) {
	if c.err != nil {
		return
	}
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) Dir(name string) { c.entry(name, cpioDir|0o755, nil, 0, 0) }
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, cpioFile|perm, data, 0, 0)
}
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, cpioSymlink|0o777, []byte(target), 0, 0)
}
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, cpioCharDev|perm, nil, major, minor)
}

// Close writes the trailer; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}
