//go:build linux

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
)

// extractVmlinux returns the uncompressed ELF kernel inside an x86 bzImage.
// QEMU boots the ELF directly (PVH entry point), which saves the guest the
// seconds it would spend decompressing itself under TCG.
//
// The boot protocol header gives the compressed payload's exact place
// (payload_offset and payload_length, protocol 2.08+). If that fails the
// image is scanned for a compressed stream's magic number instead. Go's
// standard library only reads gzip, so xz and zstd go through the xz and zstd
// tools (installed by `vm deps`).
func extractVmlinux(bz []byte) (elf []byte, format string, err error) {
	if payload, ok := bzPayload(bz); ok {
		if elf, format, err = decompressKernel(payload); err == nil {
			return elf, format, nil
		}
	}
	// Scan: try every offset where some compressor's magic appears.
	for _, m := range kernelMagics {
		for off := 0; ; {
			i := bytes.Index(bz[off:], m.magic)
			if i < 0 {
				break
			}
			if out, format, err2 := decompressKernel(bz[off+i:]); err2 == nil {
				return out, format, nil
			}
			off += i + 1
		}
	}
	if err == nil {
		err = errors.New("no compressed payload found")
	}
	return nil, "", fmt.Errorf("cannot extract vmlinux from bzImage: %w", err)
}

// bzPayload locates the compressed kernel with the boot protocol header.
func bzPayload(bz []byte) ([]byte, bool) {
	const (
		setupSectsOff = 0x1f1
		magicOff      = 0x202
		versionOff    = 0x206
		payloadOff    = 0x248
		payloadLenOff = 0x24c
	)
	if len(bz) < 0x250 || string(bz[magicOff:magicOff+4]) != "HdrS" {
		return nil, false
	}
	if binary.LittleEndian.Uint16(bz[versionOff:]) < 0x208 {
		return nil, false
	}
	setupSects := int(bz[setupSectsOff])
	if setupSects == 0 {
		setupSects = 4 // boot protocol: 0 means 4
	}
	start := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(bz[payloadOff:]))
	end := start + int(binary.LittleEndian.Uint32(bz[payloadLenOff:]))
	if start >= end || end > len(bz) {
		return nil, false
	}
	return bz[start:end], true
}

var kernelMagics = []struct {
	name  string
	magic []byte
}{
	{"gzip", []byte{0x1f, 0x8b, 0x08}},
	{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}},
	{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd}},
}

// decompressKernel decompresses a stream starting at data[0] and checks that
// the result is an ELF file. Trailing bytes after the stream are ignored: the
// kernel build appends the uncompressed size to xz and zstd payloads, and a
// magic-number scan hands over the rest of the image.
func decompressKernel(data []byte) ([]byte, string, error) {
	var out []byte
	var name string
	var err error
	switch {
	case bytes.HasPrefix(data, kernelMagics[0].magic):
		name = "gzip"
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(data)); err == nil {
			zr.Multistream(false)
			out, err = io.ReadAll(zr)
		}
	case bytes.HasPrefix(data, kernelMagics[1].magic):
		name = "xz"
		// --single-stream stops at the end of the first stream and ignores
		// what follows.
		out, err = filter(data, "xz", "-dc", "--single-stream")
	case bytes.HasPrefix(data, kernelMagics[2].magic):
		name = "zstd"
		// zstd has no single-frame option and fails on trailing garbage, but
		// it writes the decompressed frame before failing; the ELF check
		// below decides.
		out, err = filter(data, "zstd", "-dcq")
		if len(out) > 0 && bytes.HasPrefix(out, []byte("\x7fELF")) {
			err = nil
		}
	default:
		return nil, "", errors.New("unknown compression")
	}
	if err != nil {
		return nil, name, fmt.Errorf("%s: %w", name, err)
	}
	if !bytes.HasPrefix(out, []byte("\x7fELF")) {
		return nil, name, fmt.Errorf("%s payload is not an ELF file", name)
	}
	return out, name, nil
}

// filter pipes data through a command and returns its standard output.
func filter(data []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// extractArm64Image returns the arm64 kernel Image QEMU's virt machine
// boots with -kernel: Debian's vmlinuz is the Image gzipped, or the Image
// itself. An Image has "ARM\x64" at byte 56 (the arm64 boot protocol's
// header); decompressing it here spares the guest doing it under TCG.
func extractArm64Image(vmlinuz []byte) ([]byte, string, error) {
	isImage := func(b []byte) bool { return len(b) > 64 && string(b[56:60]) == "ARM\x64" }
	if isImage(vmlinuz) {
		return vmlinuz, "uncompressed", nil
	}
	if len(vmlinuz) > 2 && vmlinuz[0] == 0x1f && vmlinuz[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(vmlinuz))
		if err != nil {
			return nil, "", err
		}
		img, err := io.ReadAll(zr)
		if err != nil {
			return nil, "", err
		}
		if !isImage(img) {
			return nil, "", errors.New("the gzipped vmlinuz holds no arm64 Image (no ARM\\x64 magic)")
		}
		return img, "gzip", nil
	}
	return nil, "", errors.New("not an arm64 Image, gzipped or plain (an EFI zboot image is not supported)")
}
