package main

// Helpers that let the standard flag package take command lines written for
// the rdma-core and perftest tools, which parse theirs with getopt_long:
// bundled short options ("-lv"), values glued to their option ("-drxe0",
// "-i1"), options after operands, and C's strtol for numbers.

import (
	"bytes"
	"flag"
	"strings"
)

// expandShortOptions rewrites getopt-style bundles into separate arguments
// the flag package parses: "-lv" becomes "-l -v", "-drxe0" becomes
// "-d rxe0". An argument that names a flag of fs as it is ("-list",
// "-ib-dev=x", "--verbose") is left alone, as are operands, option values
// and everything after "--". Unknown letters are split out too, so that the
// flag package reports them.
func expandShortOptions(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	takesValue := func(f *flag.Flag) bool {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return !ok || !b.IsBoolFlag()
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			out = append(out, a) // an operand
			continue
		}
		name := strings.TrimLeft(a, "-")
		hasValue := strings.Contains(name, "=")
		if k := strings.IndexByte(name, '='); k >= 0 {
			name = name[:k]
		}
		if strings.HasPrefix(a, "--") && fs.Lookup(name) == nil {
			// getopt_long takes any unambiguous prefix of a long option.
			if full := longOptionFor(fs, name); full != "" {
				a = "--" + full + a[2+len(name):]
				name = full
			}
		}
		if f := fs.Lookup(name); f != nil || strings.HasPrefix(a, "--") || len(a) == 2 {
			// A whole flag name (or something the flag package will report).
			out = append(out, a)
			if f != nil && !hasValue && takesValue(f) && i+1 < len(args) {
				i++
				out = append(out, args[i]) // its value, whatever it looks like
			}
			continue
		}
		// A bundle of single-letter options.
		for k := 1; k < len(a); k++ {
			opt := "-" + a[k:k+1]
			out = append(out, opt)
			f := fs.Lookup(a[k : k+1])
			if f == nil || !takesValue(f) {
				continue
			}
			if k+1 < len(a) {
				out = append(out, a[k+1:]) // "-drxe0": the rest is the value
			} else if i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			break
		}
	}
	return out
}

// longOptionFor returns the long option (a flag name longer than one
// letter) that prefix abbreviates, or "" if none or several do.
func longOptionFor(fs *flag.FlagSet, prefix string) string {
	if prefix == "" {
		return ""
	}
	found := ""
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 && strings.HasPrefix(f.Name, prefix) {
			if found != "" {
				found = "\x00" // ambiguous
				return
			}
			found = f.Name
		}
	})
	if found == "\x00" {
		return ""
	}
	return found
}

// parsePermuted parses args as getopt_long does by default: options may
// follow operands. It returns the operands. Parsing stops at the first
// error or at "--", after which everything is an operand.
func parsePermuted(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return operands, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// cStrtol converts s as C's strtol(s, NULL, 0) does: leading white space,
// an optional sign, then a number in hexadecimal ("0x"), octal (leading
// "0") or decimal, up to the first character that is not a digit of the
// base; no digits at all give 0; overflow saturates at the int64 limits.
func cStrtol(s string) int64 {
	i := 0
	for i < len(s) && bytes.IndexByte([]byte(" \t\n\v\f\r"), s[i]) >= 0 {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base := uint64(10)
	if i < len(s) && s[i] == '0' {
		base = 8
		if i+2 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') && digitVal(s[i+2]) < 16 {
			base = 16
			i += 2
		}
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit = 1 << 63
	}
	var v uint64
	overflow := false
	for ; i < len(s); i++ {
		d := digitVal(s[i])
		if d >= base {
			break
		}
		if v > (limit-d)/base {
			overflow = true
			continue
		}
		v = v*base + d
	}
	switch {
	case overflow && neg:
		return -1 << 63
	case overflow:
		return 1<<63 - 1
	case neg:
		return int64(-v)
	}
	return int64(v)
}

// digitVal is the value of c as a digit in bases up to 36, or 36.
func digitVal(c byte) uint64 {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0')
	case 'a' <= c && c <= 'z':
		return uint64(c-'a') + 10
	case 'A' <= c && c <= 'Z':
		return uint64(c-'A') + 10
	}
	return 36
}

// funcValue is a flag.Value that calls a function on every occurrence of
// the flag, so a command can act on options in command-line order, as a
// getopt loop does.
type funcValue struct {
	set    func(string) error
	isBool bool
}

func (f funcValue) String() string     { return "" }
func (f funcValue) Set(s string) error { return f.set(s) }
func (f funcValue) IsBoolFlag() bool   { return f.isBool }
