// Package archtest checks the module's architecture as docs/architecture.md
// states it: which library package may import which. It holds tests only.
package archtest
