//go:build !linux

package perf

// quietRuntime has nothing to change where the scheduler is not Linux's.
func quietRuntime() (restore func()) { return func() {} }
