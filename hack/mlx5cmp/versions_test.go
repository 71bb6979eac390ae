//go:build linux && amd64

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenarios compare rdmago with the host's rdma-core (bookworm's 44).
// TestCompareVersions runs the same C scenario, built once against the
// host's headers, under the libibverbs and libmlx5 of later Debian
// releases, unpacked into the cache by `vm rdmacore` and never installed,
// so that a libmlx5 behaviour that changed since 44 shows which release
// rdmago matches. Each release's differences from 44 are documented in
// testdata/divergences-RELEASE.txt (side c: bookworm's rdma-core 44, side
// go: the release's), with the rdma-core change behind each.
var versionReleases = []string{"trixie", "sid"}

// requireVersions: the test downloads about 4 MB of packages per release
// on its first run (and refreshes the package index twice a day), so it
// has its own switch (make test-mlx5cmp-versions).
func requireVersions(t *testing.T) {
	t.Helper()
	if os.Getenv("RDMAGO_MLX5CMP_VERSIONS") != "1" {
		t.Skip("set RDMAGO_MLX5CMP_VERSIONS=1 to compare trixie's and sid's libmlx5 with bookworm's and rdmago's (make test-mlx5cmp-versions)")
	}
}

// buildVM builds hack/vm next to the scenario programs.
var buildVM = sync.OnceValues(func() (string, error) {
	dir, err := build()
	if err != nil {
		return "", err
	}
	vm := filepath.Join(dir, "vm")
	cmd := exec.Command("go", "build", "-o", vm, "github.com/rdmago/rdma/hack/vm")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build hack/vm: %v\n%s", err, out)
	}
	return vm, nil
})

// rdmaCoreTree fetches the release's libraries (a no-op when the cache has
// them) and returns the tree's folder and rdma-core version.
func rdmaCoreTree(t *testing.T, vm, release string) (dir, version string) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(vm, "rdmacore", "--release", release)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vm rdmacore --release %s: %v\n%s", release, err, stderr.String())
	}
	dir = strings.TrimSpace(string(out))
	data, err := os.ReadFile(filepath.Join(dir, "info.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Version string }
	if err := json.Unmarshal(data, &info); err != nil || info.Version == "" {
		t.Fatalf("%s/info.json: no version (%v)", dir, err)
	}
	t.Logf("%s: rdma-core %s in %s (ready in %.1fs)", release, info.Version, dir, time.Since(start).Seconds())
	return dir, info.Version
}

// releaseTranscript runs the C scenario under the release's loader and
// libraries, and checks from the loader's own report (LD_DEBUG=files names
// every object it initialises, by the path it loaded) that libibverbs,
// libmlx5 and every other library came from the tree and none from the
// host.
func releaseTranscript(t *testing.T, vm, release, tree string) []string {
	t.Helper()
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), release+".txt")
	start := time.Now()
	cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), "run", "-profile", profile, "-o", out, "--",
		vm, "rdmacore", "--release", release, "--", filepath.Join(dir, "scenario-c"), "all")
	cmd.Env = append(os.Environ(), "LD_DEBUG=files")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scenario-c under %s's rdma-core: %v\n%s", release, err, b)
	}
	t.Logf("%s: scenario-c ran in %.2fs", release, time.Since(start).Seconds())

	root := filepath.Join(tree, "root") + "/"
	var loaded []string
	for _, l := range strings.Split(string(b), "\n") {
		if _, path, ok := strings.Cut(l, "calling init: "); ok {
			loaded = append(loaded, strings.TrimSpace(path))
		}
	}
	var verbs, mlx5 bool
	for _, p := range loaded {
		if !strings.HasPrefix(p, root) {
			t.Errorf("%s: the scenario loaded %s, not from %s", release, p, root)
		}
		verbs = verbs || strings.HasSuffix(p, "/libibverbs.so.1")
		mlx5 = mlx5 || strings.Contains(p, "/libibverbs/libmlx5-rdmav")
	}
	if !verbs || !mlx5 {
		t.Fatalf("%s: the loader initialised no libibverbs.so.1 or no libmlx5 provider; it reported:\n%s", release, strings.Join(loaded, "\n"))
	}

	lines, err := readTranscript(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1] != "end" {
		t.Fatalf("%s: the transcript does not reach the scenario's end:\n%s", release, strings.Join(lines, "\n"))
	}
	return lines
}

func TestCompareVersions(t *testing.T) {
	requireVersions(t)
	vm, err := buildVM()
	if err != nil {
		t.Fatal(err)
	}
	divs, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	c44 := transcriptOf(t, "scenario-c", "all")
	g := transcriptOf(t, "scenario-go", "all")
	for _, release := range versionReleases {
		t.Run(release, func(t *testing.T) {
			tree, version := rdmaCoreTree(t, vm, release)
			c := releaseTranscript(t, vm, release, tree)

			file := "testdata/divergences-" + release + ".txt"
			rdivs, err := loadDivergences(file)
			if err != nil {
				t.Fatal(err)
			}
			// The both-sides blocks of divergences.txt normalise what no
			// driver chooses (random UDP source ports, descriptor
			// numbers, handles by address): they hold between any two
			// transcripts. They follow the release's own blocks, whose
			// use alone is checked.
			cdivs := slices.Clone(rdivs)
			for _, d := range divs {
				if d.Side == "both" {
					cdivs = append(cdivs, d)
				}
			}
			used := map[int]bool{}
			if d := diffWith(c44, c, cdivs, used); d != "" {
				t.Errorf("libmlx5 of rdma-core 44 (-) and of %s's rdma-core %s (+) differ beyond %s:\n%s", release, version, file, d)
			}
			for i, d := range rdivs {
				if !used[i] {
					t.Errorf("%s: %q (%s side, line %s) no longer occurs", file, d.Reason, d.Side, d.Line)
				}
			}
			// rdmago against the release, with the divergences it keeps
			// from libmlx5 44 and the release file's normalisations of
			// both sides: a block that no longer covers anything is not
			// an error here (the release may have dropped what 44 did).
			both := slices.Clone(divs)
			for _, d := range rdivs {
				if d.Side == "both" {
					both = append(both, d)
				}
			}
			if d := diffWith(c, g, both, nil); d != "" {
				t.Errorf("libmlx5 of %s's rdma-core %s (-) and rdmago (+) differ beyond testdata/divergences.txt:\n%s", release, version, d)
			}
		})
	}
}
