// Package getopt parses command lines as glibc's getopt_long does, on top
// of package flag: bundled short options, options after operands, and
// getopt's messages.
package getopt

// Helpers that let the standard flag package take command lines written for
// the rdma-core and perftest tools, which parse theirs with getopt_long:
// bundled short options ("-lv"), values glued to their option ("-drxe0",
// "-i1"), options after operands, and C's strtol for numbers.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ExpandShortOptions rewrites getopt-style bundles into separate arguments
// the flag package parses: "-lv" becomes "-l -v", "-drxe0" becomes
// "-d rxe0". An argument that names a flag of fs as it is ("-list",
// "-ib-dev=x", "--verbose") is left alone, as are operands, option values
// and everything after "--". Unknown letters are split out too, so that the
// flag package reports them.
func ExpandShortOptions(fs *flag.FlagSet, args []string) []string {
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

// NewFlagSet is a flag set for a C tool's options: flag prints nothing
// (no messages, no usage), as the tool prints its own (see Message), and
// parsing continues to the caller on an error.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses a command line as the C tools' getopt_long loops do:
// clustered short options are split (ExpandShortOptions) and options may
// follow operands (ParsePermuted). It returns the operands.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	return ParsePermuted(fs, ExpandShortOptions(fs, args))
}

// ParsePermuted parses args as getopt_long does by default: options may
// follow operands. It returns the operands. Parsing stops at the first
// error or at "--", after which everything is an operand.
func ParsePermuted(fs *flag.FlagSet, args []string) ([]string, error) {
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

// FuncValue is a flag.Value that calls a function on every occurrence of
// the flag, so a command can act on options in command-line order, as a
// getopt loop does.
type FuncValue struct {
	SetFunc func(string) error
	IsBool  bool
}

func (f FuncValue) String() string     { return "" }
func (f FuncValue) Set(s string) error { return f.SetFunc(s) }
func (f FuncValue) IsBoolFlag() bool   { return f.IsBool }

// Option is the value of an option with a long name that takes an
// argument (hasArg) or not: set gets the argument, or "true" for an option
// without one. An option without an argument given one ("--long=x") is
// refused as glibc refuses it: fail gets glibc's message, and its error is
// the parse's.
func Option(argv0, long string, hasArg bool, set func(string) error, fail func(msg string) error) FuncValue {
	return FuncValue{IsBool: !hasArg, SetFunc: func(s string) error {
		if !hasArg {
			b, err := strconv.ParseBool(s)
			if err != nil || !b {
				return fail(fmt.Sprintf("%s: option '--%s' doesn't allow an argument\n", argv0, long))
			}
		}
		return set(s)
	}}
}

// Message turns the flag package's complaint into glibc getopt's.
func Message(argv0 string, args []string, err error) string {
	if errors.Is(err, flag.ErrHelp) {
		// The flag package's own -h, -help and --help, which a C tool
		// without them refuses as any unknown option.
		for _, a := range args {
			switch a {
			case "--help":
				return fmt.Sprintf("%s: unrecognized option '%s'\n", argv0, a)
			case "-h", "-help":
				return fmt.Sprintf("%s: invalid option -- 'h'\n", argv0)
			}
		}
	}
	s := err.Error()
	name := func(prefix string) string { return strings.TrimLeft(strings.TrimPrefix(s, prefix), "-") }
	switch {
	case strings.HasPrefix(s, "flag provided but not defined: "):
		n := name("flag provided but not defined: ")
		if len(n) == 1 {
			return fmt.Sprintf("%s: invalid option -- '%s'\n", argv0, n)
		}
		// glibc quotes the whole argument, value and all.
		for _, a := range args {
			if a == "--"+n || strings.HasPrefix(a, "--"+n+"=") {
				return fmt.Sprintf("%s: unrecognized option '%s'\n", argv0, a)
			}
		}
		return fmt.Sprintf("%s: unrecognized option '--%s'\n", argv0, n)
	case strings.HasPrefix(s, "flag needs an argument: "):
		n := name("flag needs an argument: ")
		if len(n) == 1 {
			return fmt.Sprintf("%s: option requires an argument -- '%s'\n", argv0, n)
		}
		return fmt.Sprintf("%s: option '--%s' requires an argument\n", argv0, n)
	}
	return fmt.Sprintf("%s: %s\n", argv0, s)
}

// Short parses args as glibc's getopt(3) does for a program with short
// options only (optstring, where a letter followed by ':' takes an
// argument): bundles ("-ab"), arguments glued on ("-c2") or in the next
// argument, operands anywhere (getopt permutes them to the end) and "--"
// ending the options. A long option has no meaning to getopt: "--foo" is
// the letters '-', 'f', 'o', 'o'. handle is called for each option in
// order. At the first bad option Short stops and returns getopt's message
// for it with ok false; the options before it have been handled.
func Short(argv0 string, args []string, optstring string, handle func(opt byte, arg string)) (msg string, ok bool) {
	takes := func(c byte) (known, hasArg bool) {
		if c == ':' {
			return false, false
		}
		i := strings.IndexByte(optstring, c)
		if i < 0 {
			return false, false
		}
		return true, i+1 < len(optstring) && optstring[i+1] == ':'
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue // an operand
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			known, hasArg := takes(c)
			if !known {
				return fmt.Sprintf("%s: invalid option -- '%c'\n", argv0, c), false
			}
			if !hasArg {
				handle(c, "")
				continue
			}
			switch {
			case k+1 < len(a):
				handle(c, a[k+1:])
			case i+1 < len(args):
				i++
				handle(c, args[i])
			default:
				return fmt.Sprintf("%s: option requires an argument -- '%c'\n", argv0, c), false
			}
			break
		}
	}
	return "", true
}
