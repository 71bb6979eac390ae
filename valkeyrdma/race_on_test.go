//go:build race

package valkeyrdma_test

// raceEnabled: the test binary was built with -race, which slows the Go
// side of a test that a C peer with fixed timeouts drives.
const raceEnabled = true
