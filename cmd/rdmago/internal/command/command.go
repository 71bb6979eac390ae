// Package command holds the type of rdmago's subcommands and the
// dispatcher over a set of them, with "help".
package command

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Command is one subcommand of rdmago.
type Command struct {
	Name    string // what the user types: "devinfo"
	Summary string // one line for "rdmago help"
	// Run runs the command with its arguments (those after its name) and
	// returns the exit status. It writes only to stdout and stderr, so that
	// tests can run it in-process. "-h" prints the usage to stdout and
	// returns 0, except in the ports of C tools that refuse -h: those
	// answer it as their C tool does (an invalid option, the usage and its
	// status), and have Usage.
	Run func(args []string, stdout, stderr io.Writer) int
	// Usage, when set, writes the usage for "rdmago help NAME", which
	// otherwise runs the command with "-h".
	Usage func(w io.Writer)
}

// Set holds subcommands by name, "help" among them, and dispatches
// a command line to them.
type Set map[string]*Command

// NewSet is the set of the commands of lists, with "help".
func NewSet(lists ...[]*Command) Set {
	s := Set{}
	s.Register(&Command{Name: "help", Summary: "show the commands, or a command's usage", Run: s.runHelp})
	for _, cs := range lists {
		for _, c := range cs {
			s.Register(c)
		}
	}
	return s
}

// Register adds a subcommand; a duplicate name is a programming error.
func (s Set) Register(c *Command) {
	if _, dup := s[c.Name]; dup {
		panic("rdmago: command registered twice: " + c.Name)
	}
	s[c.Name] = c
}

// Run runs the command line (without the program name) and returns the
// exit status.
func (s Set) Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		s.WriteHelp(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		s.WriteHelp(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	c, ok := s[name]
	if !ok {
		fmt.Fprintf(stderr, "rdmago: unknown command %q\nRun 'rdmago help' for usage.\n", name)
		return 2
	}
	return c.Run(args[1:], stdout, stderr)
}

// runHelp is "rdmago help [command]".
func (s Set) runHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		s.WriteHelp(stdout)
		return 0
	case 1:
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			s.WriteHelp(stdout)
			return 0
		}
		c, ok := s[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "rdmago help: unknown command %q\nRun 'rdmago help' for usage.\n", args[0])
			return 2
		}
		if c.Name == "help" {
			s.WriteHelp(stdout)
			return 0
		}
		if c.Usage != nil {
			c.Usage(stdout)
			return 0
		}
		return c.Run([]string{"-h"}, stdout, stderr)
	}
	fmt.Fprintf(stderr, "usage: rdmago help [command]\n")
	return 2
}

// WriteHelp lists the commands.
func (s Set) WriteHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString("rdmago is a tool for RDMA devices, written in pure Go.\n\n")
	b.WriteString("Usage:\n\n\trdmago <command> [arguments]\n\nThe commands are:\n\n")
	names := make([]string, 0, len(s))
	width := 0
	for n := range s {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\t%-*s  %s\n", width, n, s[n].Summary)
	}
	b.WriteString("\nUse \"rdmago help <command>\" for more about a command.\n")
	io.WriteString(w, b.String())
}
