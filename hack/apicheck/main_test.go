package main

import (
	"strings"
	"testing"
)

// TestCheck: the check passes only when every difference from the frozen
// API is recorded in next.txt and named on the explanation page.
func TestCheck(t *testing.T) {
	const (
		f  = "pkg example.com/m/a, func F(int) error"
		g  = "pkg example.com/m/a, func G() bool"
		m  = "pkg example.com/m/a, method (*T) M() error"
		m2 = "pkg example.com/m/a, method (*T) M(int) error"
	)
	frozen := []string{f, m}
	for _, tc := range []struct {
		name string
		api  []string
		next []string
		page string
		want string // a substring of the problems; "" for none
	}{
		{"unchanged", []string{f, m}, nil, "", ""},
		{"added, unrecorded", []string{f, g, m}, nil, "G", "unrecorded: + " + g},
		{"removed, unrecorded", []string{f}, nil, "", "unrecorded: - " + m},
		{"signature changed, unrecorded", []string{f, m2}, nil, "T.M", "unrecorded: + " + m2},
		{"added, recorded, explained", []string{f, g, m}, []string{"+ " + g}, "`G` is new", ""},
		{"added, recorded, unexplained", []string{f, g, m}, []string{"+ " + g}, "nothing", "changes G, which the explanation page does not name"},
		{"changed, recorded, explained", []string{f, m2}, []string{"- " + m, "+ " + m2}, "T.M takes an int", ""},
		{"recorded, not made", []string{f, m}, []string{"+ " + g}, "G", "unrecorded: - " + g},
		{"bad line", []string{f, m}, []string{g}, "", "is not"},
	} {
		problems := strings.Join(check(tc.api, frozen, tc.next, tc.page), "\n")
		if tc.want == "" && problems != "" || !strings.Contains(problems, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, problems, tc.want)
		}
	}
}

func TestIdentifier(t *testing.T) {
	for line, want := range map[string]string{
		"pkg p, func F(int) error":               "F",
		"pkg p, method (*T) M() error":           "T.M",
		"pkg p, method (T) String() string":      "T.String",
		"pkg p, type T struct":                   "T",
		"pkg p, type T struct, Field int":        "T.Field",
		"pkg p, const C T = 1":                   "C",
		"pkg p, var ErrX error":                  "ErrX",
		"pkg p, type I interface, M([]byte) int": "I.M",
	} {
		if got := identifier(line); got != want {
			t.Errorf("identifier(%q) = %q, want %q", line, got, want)
		}
	}
}
