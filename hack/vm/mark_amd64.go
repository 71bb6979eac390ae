//go:build linux

package main

// mark executes the icprof plugin's marker instruction.
func mark()

const haveMark = true
