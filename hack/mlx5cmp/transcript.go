//go:build linux && amd64

package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// transcript is the canonical record of one run: one line per command the
// driver sent the kernel, per marker, per snapshot item. Addresses in the
// target's memory appear as (region, offset), never as numbers, so that two
// processes' transcripts compare equal when their drivers behave alike.
type transcript struct {
	lines []string
}

func (t *transcript) line(format string, args ...any) {
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

func (t *transcript) writeFile(path string) error {
	text := strings.Join(t.lines, "\n") + "\n"
	if path == "" {
		_, err := os.Stdout.WriteString(text)
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func readTranscript(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}
