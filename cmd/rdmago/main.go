package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
)

// commands holds the subcommands by name, filled by init from each tool's
// list.
var commands = map[string]*command{}

// register adds a subcommand; a duplicate name is a programming error.
func register(c *command) {
	if _, dup := commands[c.Name]; dup {
		panic("rdmago: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

func init() {
	register(&command{Name: "help", Summary: "show the commands, or a command's usage", Run: runHelp})
	register(&command{Name: "version", Summary: "print the version of rdmago", Run: runVersion})
	for _, cs := range [][]*command{
		devinfoCommands(), doctorCommands(), perfCommands(), pingpongCommands(), rdmaserverCommands(), rpingCommands(),
	} {
		for _, c := range cs {
			register(c)
		}
	}
}

// version is set at link time with -ldflags "-X main.version=v1.2.3"; when
// empty, the module version recorded in the binary is used.
var version string

func main() {
	os.Exit(rdmago(os.Args[1:], os.Stdout, os.Stderr))
}

// rdmago runs the command line (without the program name) and returns the
// exit status.
func rdmago(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeHelp(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		writeHelp(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "rdmago: unknown command %q\nRun 'rdmago help' for usage.\n", name)
		return 2
	}
	return c.Run(args[1:], stdout, stderr)
}

// runHelp is "rdmago help [command]".
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		writeHelp(stdout)
		return 0
	case 1:
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			writeHelp(stdout)
			return 0
		}
		c, ok := commands[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "rdmago help: unknown command %q\nRun 'rdmago help' for usage.\n", args[0])
			return 2
		}
		if c.Name == "help" {
			writeHelp(stdout)
			return 0
		}
		return c.Run([]string{"-h"}, stdout, stderr)
	}
	fmt.Fprintf(stderr, "usage: rdmago help [command]\n")
	return 2
}

// writeHelp lists the commands.
func writeHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString("rdmago is a tool for RDMA devices, written in pure Go.\n\n")
	b.WriteString("Usage:\n\n\trdmago <command> [arguments]\n\nThe commands are:\n\n")
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\t%-*s  %s\n", width, n, commands[n].Summary)
	}
	b.WriteString("\nUse \"rdmago help <command>\" or \"rdmago <command> -h\" for more about a command.\n")
	io.WriteString(w, b.String())
}

// runVersion is "rdmago version".
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintf(stdout, "usage: rdmago version\n\nPrint the version of rdmago and of the Go toolchain that built it.\n")
			return 0
		}
		fmt.Fprintf(stderr, "usage: rdmago version\n")
		return 2
	}
	fmt.Fprintf(stdout, "rdmago %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// buildVersion is the version to report: the link-time one, else the main
// module's version ("(devel)" for a build from a work tree).
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
