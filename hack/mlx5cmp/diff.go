//go:build linux && amd64

package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// A divergence is a documented difference between libmlx5 and rdmago: in
// the steps matching Step (a regular expression over the step's name;
// nil: every step), a line of Side's transcript ("c", "go" or "both")
// that matches Match (nil: any line) and Line is left out of the
// comparison, or, when Replace is set, has every match of Line replaced
// by it (a field the two send differently, on a line that must otherwise
// agree). Count, when not 0, limits how many lines it covers. docs/mlx5.md
// gives each one's reason and the libmlx5 behaviour it departs from.
type divergence struct {
	Side    string
	Step    *regexp.Regexp
	Match   *regexp.Regexp
	Line    *regexp.Regexp
	Replace *string
	Count   int
	Reason  string
}

// section is a step's lines.
type section struct {
	name  string
	lines []string
}

func sections(lines []string) []section {
	out := []section{{name: "(start)"}}
	for _, l := range lines {
		if name, ok := strings.CutPrefix(l, "step "); ok {
			out = append(out, section{name: name})
			continue
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, l)
	}
	return out
}

// filter drops the lines a documented divergence covers and returns which
// divergences were used.
func filter(side string, secs []section, divs []divergence, used map[int]bool) []section {
	out := make([]section, len(secs))
	left := make([]int, len(divs))
	for j, d := range divs {
		left[j] = d.Count
	}
	for i, s := range secs {
		out[i].name = s.name
	line:
		for _, l := range s.lines {
			for j, d := range divs {
				if (d.Side != side && d.Side != "both") || (d.Step != nil && !d.Step.MatchString(s.name)) ||
					(d.Match != nil && !d.Match.MatchString(l)) || !d.Line.MatchString(l) {
					continue
				}
				if d.Count > 0 {
					if left[j] == 0 {
						continue
					}
					left[j]--
				}
				used[j] = true
				if d.Replace == nil {
					continue line
				}
				l = d.Line.ReplaceAllString(l, *d.Replace)
			}
			out[i].lines = append(out[i].lines, l)
		}
	}
	return out
}

// diffTranscripts compares two transcripts step by step and returns a
// report of every difference, or "" when they agree.
func diffTranscripts(a, b []string) string {
	return diffWith(a, b, nil, nil)
}

// diffWith compares the C transcript c with the Go transcript g after
// leaving out the documented divergences; used collects the divergences
// that covered a line.
func diffWith(c, g []string, divs []divergence, used map[int]bool) string {
	if used == nil {
		used = map[int]bool{}
	}
	cs := filter("c", sections(c), divs, used)
	gs := filter("go", sections(g), divs, used)
	var sb strings.Builder
	n := max(len(cs), len(gs))
	for i := 0; i < n; i++ {
		switch {
		case i >= len(cs):
			fmt.Fprintf(&sb, "step %s: only in the second transcript\n", gs[i].name)
			continue
		case i >= len(gs):
			fmt.Fprintf(&sb, "step %s: only in the first transcript\n", cs[i].name)
			continue
		case cs[i].name != gs[i].name:
			fmt.Fprintf(&sb, "step %d: %s against %s\n", i, cs[i].name, gs[i].name)
			continue
		}
		if d := lineDiff(commandsSorted(cs[i].lines), commandsSorted(gs[i].lines)); d != "" {
			fmt.Fprintf(&sb, "step %s:\n%s", cs[i].name, d)
		}
	}
	return sb.String()
}

// lineDiff is a plain longest-common-subsequence diff: "-" lines are the
// first side's alone, "+" the second's.
func lineDiff(a, b []string) string {
	m, n := len(a), len(b)
	lcs := make([][]int, m+1)
	for i := range lcs {
		lcs[i] = make([]int, n+1)
	}
	for i := m - 1; i >= 0; i-- {
		for j := n - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < m || j < n {
		switch {
		case i < m && j < n && a[i] == b[j]:
			i++
			j++
		case j < n && (i == m || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&sb, "  + %s\n", b[j])
			j++
		default:
			fmt.Fprintf(&sb, "  - %s\n", a[i])
			i++
		}
	}
	return sb.String()
}

// commandsSorted puts a step's kernel commands first, in sorted order, and
// keeps the rest (WQEs, doorbells, completions) in the order they came.
// Two drivers may issue the same commands in a different order (libmlx5
// allocates its UARs when the context opens, rdmago when a CQ or QP first
// needs one); where the order matters, it shows in what the commands carry
// (a UAR's page index, a CQ's handle), which is compared.
func commandsSorted(lines []string) []string {
	var cmds, rest []string
	for _, l := range lines {
		if strings.HasPrefix(l, "cmd ") {
			cmds = append(cmds, l)
		} else {
			rest = append(rest, l)
		}
	}
	sort.Strings(cmds)
	return append(cmds, rest...)
}
