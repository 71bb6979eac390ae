//go:build !race

package valkeyrdma_test

const raceEnabled = false
