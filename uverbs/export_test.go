package uverbs

// CollectUntil is waitFor for the device tests, in package uverbs_test,
// which see the identifiers this package's test files export.
var CollectUntil = waitFor
