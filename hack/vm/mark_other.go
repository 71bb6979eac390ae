//go:build linux && !amd64

package main

// The marker is an x86 instruction; the icount VM is amd64.
func mark() {}

const haveMark = false
