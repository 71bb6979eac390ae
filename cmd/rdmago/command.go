package main

import (
	"io"
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
