//go:build linux && amd64

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// profileCases is the device-profile matrix: the RC scenarios of
// TestCompareRC (whose device is testdata/cx6.json) run again on other
// devices and driver settings, libmlx5 against rdmago on each. divs are
// the divergence files that apply: divergences.txt is rdmago's standing
// difference from libmlx5 and is loaded for every case, but some of its
// blocks describe what a profile switches off (DEVX probes, dynamic UAR
// commands), so only the blocks of the case's own files must each cover
// something.
var profileCases = []struct {
	name    string
	profile string
	env     []string // the targets' environment, added to the test's
	divs    []string // the case's own divergence files
	// changes: the keys in which profile differs from testdata/cx6.json
	// (TestProfileVariants), so that the variants follow cx6.json.
	changes []string
}{
	// Both drivers read MLX5_CQE_SIZE when they open the context: every
	// CQ is then created with cqe_size 128, and the device writes each
	// 64-byte CQE in the second half of a 128-byte entry.
	{name: "cqe128", profile: "testdata/cx6.json", env: []string{"MLX5_CQE_SIZE=128"}},
	// A device whose cqe_version capability is 0: both drivers ask for
	// version 1 and mlx5_ib grants the smaller, so GET_CONTEXT answers
	// 0, the QPs carry no user index, and each CQE names its QP by
	// number (sop_drop_qpn) and an SRQ receive's SRQ by number
	// (srqn_uidx).
	{name: "cqe-v0", profile: "testdata/cx6-cqe-v0.json", divs: []string{"testdata/divergences-cqe-v0.txt"},
		changes: []string{"cqe_version"}},
	// A kernel without dynamic UARs (dyn_uar false: it ignores
	// MLX5_LIB_CAP_DYN_UAR): GET_CONTEXT allocates the static UAR pages
	// the request asks for (tot_bfregs), the drivers map them by page
	// index, a CQ arms through the first, and QP_CREATE picks each QP's
	// BlueFlame register (bfreg_index).
	{name: "static-uar", profile: "testdata/cx6-static-uar.json", divs: []string{"testdata/divergences-static-uar.txt"},
		// mlx5_ib's answer with static UARs: calc_dynamic_bfregs's
		// MLX5_MAX_DYN_BFREGS for 4 KiB pages.
		changes: []string{"dyn_uar", "mlx5_context.num_dyn_bfregs"}},
	// DEVX on: libmlx5's QUERY_HCA_CAP commands succeed (the fake
	// answers every capability page with zeros, see runDEVXOther), and
	// its ibv_* verbs must still send what rdmago sends.
	{name: "devx", profile: "testdata/cx6-devx.json", divs: []string{"testdata/divergences-devx.txt"},
		changes: []string{"devx"}},
	// All the older settings at once: CQE version 0, static UARs and
	// 128-byte CQEs.
	{name: "legacy", profile: "testdata/cx6-legacy.json", env: []string{"MLX5_CQE_SIZE=128"},
		divs:    []string{"testdata/divergences-cqe-v0.txt", "testdata/divergences-static-uar.txt"},
		changes: []string{"cqe_version", "dyn_uar", "mlx5_context.num_dyn_bfregs"}},
}

// profileTranscript runs one scenario program under the supervisor on
// the profile prof, with env added to the environment.
func profileTranscript(t *testing.T, prof string, env []string, prog string, args ...string) []string {
	t.Helper()
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(prog)+".txt")
	cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), append([]string{"run", "-profile", prof, "-o", out, "--", filepath.Join(dir, prog)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s on %s %s: %v\n%s", prog, strings.Join(args, " "), prof, strings.Join(env, " "), err, b)
	}
	lines, err := readTranscript(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1] != "end" {
		t.Fatalf("%s on %s: the transcript does not reach the scenario's end:\n%s", prog, prof, strings.Join(lines, "\n"))
	}
	return lines
}

// TestCompareProfiles runs the RC scenarios of both drivers on each case
// of profileCases and requires the transcripts to agree but for the
// documented divergences, as TestCompareRC does on cx6.json; on each, the
// fence-bit mutant must still be caught.
func TestCompareProfiles(t *testing.T) {
	requireCompare(t)
	base, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range profileCases {
		t.Run(pc.name, func(t *testing.T) {
			var own []divergence
			for _, f := range pc.divs {
				d, err := loadDivergences(f)
				if err != nil {
					t.Fatal(err)
				}
				own = append(own, d...)
			}
			// The case's own blocks come first, so that their indexes
			// in used are theirs.
			divs := append(own[:len(own):len(own)], base...)
			c := profileTranscript(t, pc.profile, pc.env, "scenario-c", "all")
			g := profileTranscript(t, pc.profile, pc.env, "scenario-go", "all")
			used := map[int]bool{}
			if d := diffWith(c, g, divs, used); d != "" {
				t.Errorf("on %s %s, libmlx5 (-) and rdmago (+) differ:\n%s", pc.profile, strings.Join(pc.env, " "), d)
			}
			for i, d := range own {
				if !used[i] {
					t.Errorf("divergence %q (%s side, line %s) no longer occurs", d.Reason, d.Side, d.Line)
				}
			}
			if n := countWQEs(c); n < 100 {
				t.Errorf("the C transcript holds %d WQEs; the scenarios post more than 200", n)
			}
			// The comparison still sees a wrong fence bit on this
			// device, and only where it fences.
			m := profileTranscript(t, pc.profile, pc.env, "scenario-go-mutant", "all")
			if steps := diffSteps(diffWith(c, m, divs, nil)); len(steps) != 1 || steps[0] != "rc.fence" {
				t.Errorf("the mutant provider differs in steps %q, want only rc.fence", steps)
			}
		})
	}
}

// diffSteps returns the steps a diffWith report names.
func diffSteps(d string) []string {
	var steps []string
	for _, l := range strings.Split(d, "\n") {
		if s, ok := strings.CutPrefix(l, "step "); ok && strings.HasSuffix(s, ":") {
			steps = append(steps, strings.TrimSuffix(s, ":"))
		}
	}
	return steps
}

// TestProfileVariants: each profile of the matrix is testdata/cx6.json but
// for the keys its case names, so that a change to cx6.json that is not
// made to the variants too shows here.
func TestProfileVariants(t *testing.T) {
	flat := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out := map[string]any{}
		var walk func(prefix string, m map[string]any)
		walk = func(prefix string, m map[string]any) {
			for k, v := range m {
				if sub, ok := v.(map[string]any); ok {
					walk(prefix+k+".", sub)
					continue
				}
				out[prefix+k] = v
			}
		}
		walk("", m)
		return out
	}
	type variant struct {
		path    string
		changes []string
	}
	vs := []variant{{writeABIProfile, []string{"no_verbs_ioctl"}}}
	for _, pc := range profileCases {
		vs = append(vs, variant{pc.profile, pc.changes})
	}
	base := flat(profile)
	for _, v := range vs {
		p := flat(v.path)
		var diff []string
		for k := range base {
			if _, ok := p[k]; !ok {
				diff = append(diff, k)
			}
		}
		for k, x := range p {
			if bx, ok := base[k]; !ok || !reflect.DeepEqual(bx, x) {
				diff = append(diff, k)
			}
		}
		slices.Sort(diff)
		want := slices.Sorted(slices.Values(v.changes))
		if !slices.Equal(diff, want) {
			t.Errorf("%s differs from %s in %q, want %q", v.path, profile, diff, want)
		}
	}
}

// writeABIProfile is cx6.json on a kernel without the uverbs ioctl
// interface.
const writeABIProfile = "testdata/cx6-write-abi.json"

// TestLegacyWriteABI runs both scenario programs on a kernel without the
// uverbs ioctl interface (testdata/cx6-write-abi.json: RDMA_VERBS_IOCTL
// answers ENOTTY). There is nothing to compare: libibverbs falls back to
// the write() commands, which the fake kernel does not emulate for
// contexts (so the C program stops at its open too), and rdmago needs
// the ioctl interface for a provider's context. The test pins down that
// rdmago stops with a clear error at the context's creation, having sent
// nothing but the one ioctl, and does not crash.
func TestLegacyWriteABI(t *testing.T) {
	requireCompare(t)
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	runOn := func(prog string) (string, []string) {
		out := filepath.Join(t.TempDir(), prog+".txt")
		cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), "run", "-profile", writeABIProfile, "-o", out, "--", filepath.Join(dir, prog), "all")
		b, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s ran to its end on a kernel without the ioctl interface:\n%s", prog, b)
		}
		lines, rerr := readTranscript(out)
		if rerr != nil {
			t.Fatal(rerr)
		}
		return string(b), lines
	}

	// libibverbs: the ioctl refused, then GET_CONTEXT by write()
	// (command 0, which the fake refuses: it emulates no write-only
	// context).
	_, c := runOn("scenario-c")
	if !containsLine(c, "cmd f0 ioctl RDMA_VERBS_IOCTL in{} out{} = -25 ") || !containsLine(c, "cmd f0 write CMD_0 ") {
		t.Errorf("libibverbs did not fall back from the ioctl to write(GET_CONTEXT):\n%s", strings.Join(c, "\n"))
	}

	out, g := runOn("scenario-go")
	const want = "scenario-go: open mlx5_0: uverbs: get context: the kernel has no uverbs ioctl method for it, and rdmago sends a provider's context data only through that (Linux 5.x and later): inappropriate ioctl for device"
	if !strings.Contains(out, want) || strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
		t.Errorf("rdmago's output on a kernel without the ioctl interface:\n%s\nwant the error %q and no panic", out, want)
	}
	var cmds []string
	for _, l := range g {
		if strings.HasPrefix(l, "cmd ") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 1 || !strings.HasPrefix(cmds[0], "cmd f0 ioctl RDMA_VERBS_IOCTL in{} out{} = -25 ") {
		t.Errorf("rdmago sent %d commands, want the one refused ioctl:\n%s", len(cmds), strings.Join(cmds, "\n"))
	}
}

func containsLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
