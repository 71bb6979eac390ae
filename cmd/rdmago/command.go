package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// command is one subcommand of rdmago.
type command struct {
	Name    string // what the user types: "devinfo"
	Summary string // one line for "rdmago help"
	// Run runs the command with its arguments (those after its name) and
	// returns the exit status. It writes only to stdout and stderr, so that
	// tests can run it in-process; "-h" should print its usage to stdout
	// and return 0.
	Run func(args []string, stdout, stderr io.Writer) int
}

// commandSet holds subcommands by name, "help" among them, and dispatches
// a command line to them.
type commandSet map[string]*command

// newCommandSet is the set of the commands of lists, with "help".
func newCommandSet(lists ...[]*command) commandSet {
	s := commandSet{}
	s.register(&command{Name: "help", Summary: "show the commands, or a command's usage", Run: s.runHelp})
	for _, cs := range lists {
		for _, c := range cs {
			s.register(c)
		}
	}
	return s
}

// register adds a subcommand; a duplicate name is a programming error.
func (s commandSet) register(c *command) {
	if _, dup := s[c.Name]; dup {
		panic("rdmago: command registered twice: " + c.Name)
	}
	s[c.Name] = c
}

// run runs the command line (without the program name) and returns the
// exit status.
func (s commandSet) run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		s.writeHelp(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		s.writeHelp(stdout)
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
func (s commandSet) runHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		s.writeHelp(stdout)
		return 0
	case 1:
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			s.writeHelp(stdout)
			return 0
		}
		c, ok := s[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "rdmago help: unknown command %q\nRun 'rdmago help' for usage.\n", args[0])
			return 2
		}
		if c.Name == "help" {
			s.writeHelp(stdout)
			return 0
		}
		return c.Run([]string{"-h"}, stdout, stderr)
	}
	fmt.Fprintf(stderr, "usage: rdmago help [command]\n")
	return 2
}

// writeHelp lists the commands.
func (s commandSet) writeHelp(w io.Writer) {
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
	b.WriteString("\nUse \"rdmago help <command>\" or \"rdmago <command> -h\" for more about a command.\n")
	io.WriteString(w, b.String())
}
