//go:build linux && amd64

package main

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// maxRandomInput is the most input bytes the random programs keep
// (random.c's MAX_INPUT, gorandom's maxInput); a run reads fewer.
const maxRandomInput = 4096

// inheritedCloseOnExec marks the descriptors above stderr that this
// process inherited close-on-exec (Go opens its own so). A fuzz worker
// inherits its pipes to the fuzzing coordinator and their shared memory
// (descriptors 3 to 5) without the flag, and would hand them to every
// program it starts: mlx5cmp, its shim, the scenario programs, which
// must not hold the worker's connection. (While they leaked, 2 of some
// 20 fuzzing runs lost a worker on its first input, "exit status 2",
// its output discarded by the coordinator.)
func inheritedCloseOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// randomDivergences are divergences.txt's and divergences-random.txt's
// blocks, read once.
var randomDivergences = sync.OnceValues(func() ([]divergence, error) {
	shared, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		return nil, err
	}
	own, err := loadDivergences("testdata/divergences-random.txt")
	if err != nil {
		return nil, err
	}
	return append(shared, own...), nil
})

// randomTranscript runs one random program on the input in hex under the
// supervisor and returns its transcript, which must reach the end. A run
// takes a fraction of a second; the timeout only bounds a hung one.
func randomTranscript(t *testing.T, prog, in string) []string {
	t.Helper()
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := filepath.Join(t.TempDir(), prog+".txt")
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "mlx5cmp"), "run", "-profile", profile, "-o", out, "--", filepath.Join(dir, prog), in)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s on input %s: %v\n%s", prog, in, err, b)
	}
	lines, err := readTranscript(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1] != "end" {
		t.Fatalf("%s on input %s: the transcript does not reach the end:\n%s", prog, in, strings.Join(lines, "\n"))
	}
	return lines
}

// compareRandom runs the input through libmlx5 (random-c) and through the
// Go program goProg and returns their differences, "" when none.
func compareRandom(t *testing.T, goProg string, data []byte) (string, string) {
	t.Helper()
	divs, err := randomDivergences()
	if err != nil {
		t.Fatal(err)
	}
	in := hex.EncodeToString(data[:min(len(data), maxRandomInput)])
	c := randomTranscript(t, "random-c", in)
	g := randomTranscript(t, goProg, in)
	return diffWith(c, g, divs, nil), in
}

// randomSeeds are FuzzCompare's seeds, in the input format random.c's top
// comment specifies: each covers some of the ops (hex, spaces ignored).
var randomSeeds = []string{
	// recv 1 (256 bytes in buf1); SEND of 64, signalled; complete; drain 16.
	"03 11000084  00 00120040400000  04 7f",
	// recv 3; one list of the seven opcodes, signalled, one 32-byte SGE
	// each (the atomics' 8 bytes); complete; drain 16.
	"13 11000084 11040084 11080084  30 0012000020 0000 01121010201000 02120020202000 03120030203000 04120040204000 05120050205000 06120060206000  04 7f",
	// recv 2; SEND inline 47 bytes, RDMA_WRITE inline of 4 SGEs of 47 (188,
	// max_inline_data), RDMA_WRITE_WITH_IMM inline of 186; complete; drain.
	"0b 11000084 11100084  10 001a01002f0000 024a02002f03002f04002f05002f2000 031a0600dd3000  04 7f",
	// 4 writes: unsignalled, fenced, solicited, signalled; complete 2;
	// poll 1; complete; poll 1; drain 8.
	"18 021000004080 00 021100404080 40 021400804080 80 021200c04080c0  14 06 04 06 3f",
	// 2 writes; next request fails with syndrome 0x13; complete; poll 4;
	// recv (skipped: the QP has failed); SEND (flushed); complete; drain.
	"08 021200004001 00 021200404002 00  45 04 1e  03 11000084  00 00120000400000  04 7f",
	// refused: a write of 5 SGEs after a good one, an inline SEND of 254
	// bytes, a receive of 5 SGEs after a good one; complete; drain.
	"08 021200004000 00 02f2 000010000010000010000010000010 0000  00 001a0000ff0000  0b 11000084 1f 000010000010000010000010000010  04 7f",
	// zero lengths: a write of no SGE, a write of 3 SGEs two of them empty;
	// a receive of no SGE and a SEND of none into it; a SEND_WITH_IMM with
	// no receive posted (RNR); complete; drain.
	"08 02020000 02320000000010100020000100  03 00  00 00020000  00 01120000080000  04 7f",
	// CAS that swaps, FADD on the swapped value, READ of 128 bytes; complete;
	// drain; syndrome 0x14 for the next request, a write; complete; drain.
	"10 8312000008 5000 0612000808 5000 0412010082 5000  04 7f  4d 00 021200004000 00 04 7f",
	// a write, then an inline SEND of two 128-byte SGEs (over
	// max_inline_data: libmlx5 copies the first into the ring before it
	// refuses the request, and rings the doorbell with its control
	// segment); a FADD and a 5-byte inline SEND_WITH_IMM where that copy
	// landed; complete; drain.
	"08 021200004000 00 002a0000c00100c00000  00 06120008085000  00 011a0000050000  04 7f",
}

// FuzzCompare draws a sequence of work requests, device completions (some
// with an error syndrome) and polls from its input (random.c's top comment
// gives the format), runs it on libmlx5 and on rdmago's provider against
// the same fake device, and requires equal transcripts but for the
// documented divergences. It runs with RDMAGO_MLX5CMP=1 only, as the RC
// comparison does; each input costs two supervised runs, 0.1 to 0.3 s.
func FuzzCompare(f *testing.F) {
	if os.Getenv("RDMAGO_MLX5CMP") != "1" {
		f.Skip("set RDMAGO_MLX5CMP=1 to compare libmlx5 with rdmago's provider on random sequences")
	}
	// Build here, not in the first input: the fuzzing engine allows an
	// input 10 s in a worker (then panics, and the worker exits 2), and
	// the build of all the programs can take longer on a busy machine.
	if _, err := build(); err != nil {
		f.Fatal(err)
	}
	for _, s := range randomSeeds {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			f.Fatalf("seed %q: %v", s, err)
		}
		f.Add(b)
	}
	// Longer mixed sequences, from a fixed generator.
	r := rand.New(rand.NewPCG(1, 2))
	for range 3 {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if d, in := compareRandom(t, "random-go", data); d != "" {
			t.Errorf("libmlx5 (-) and rdmago (+) differ on input %s:\n%s", in, d)
		}
	})
}

// TestCompareRandomCatchesMutant is the random comparison's own test: a
// Go program built with the mlx5cmp_mutant provider (no fence bit) must
// differ from libmlx5 on a seed that fences, in the step that posts it.
func TestCompareRandomCatchesMutant(t *testing.T) {
	requireCompare(t)
	b, err := hex.DecodeString(strings.ReplaceAll(randomSeeds[3], " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	d, in := compareRandom(t, "random-go-mutant", b)
	if d == "" {
		t.Fatalf("the mutant provider's transcript equals libmlx5's on input %s: the random comparison cannot see a wrong fence bit", in)
	}
	if !strings.HasPrefix(d, "step 1.send:\n") || strings.Count(d, "\nstep ") != 0 {
		t.Errorf("the mutant differs other than in step 1.send:\n%s", d)
	}
}

// TestCompareRandomDivergences runs FuzzCompare's seeds and requires each
// block of divergences-random.txt to cover a line of them, as TestCompareRC
// does for divergences.txt: a block no seed needs is stale, or lacks a seed.
func TestCompareRandomDivergences(t *testing.T) {
	requireCompare(t)
	divs, err := randomDivergences()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, s := range randomSeeds {
		in := strings.ReplaceAll(s, " ", "")
		c := randomTranscript(t, "random-c", in)
		g := randomTranscript(t, "random-go", in)
		if d := diffWith(c, g, divs, used); d != "" {
			t.Errorf("libmlx5 (-) and rdmago (+) differ on seed %s:\n%s", in, d)
		}
	}
	for i := len(shared); i < len(divs); i++ {
		if !used[i] {
			t.Errorf("divergence %q (%s side, line %s) covers no line of the seeds: remove it, or add a seed that needs it", divs[i].Reason, divs[i].Side, divs[i].Line)
		}
	}
}
