//go:build linux && amd64

// Command mlx5cmp runs a program against a fake mlx5_ib kernel and writes
// what crossed between them as a transcript, so that rdma-core's libmlx5
// and rdmago's mlx5 provider can be compared byte for byte on the same
// device. docs/mlx5.md explains the method and what it proves.
//
//	mlx5cmp run -profile FILE -o TRANSCRIPT [-v] -- PROGRAM [ARG...]
//	mlx5cmp pair -profile FILE -port N [-timeout D] [-v] -- PROGRAM [ARG...] -- PROGRAM [ARG...]
//	mlx5cmp diff A B
//
// pair runs two programs on one fake device, which carries their
// messages: the first must listen on TCP port N before the second starts
// (a server and its client, as ibv_rc_pingpong's).
// run needs root: it mounts a fake sysfs over /sys/class in a mount
// namespace of the target's own. It is
// written for x86-64 Linux: the filter names that architecture's system
// calls.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == shimArg {
		if err := shimMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "mlx5cmp shim: %v\n", err)
		}
		os.Exit(126)
	}
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "pair":
		err = pairCmd(os.Args[2:])
	case "diff":
		err = diffCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mlx5cmp: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mlx5cmp run -profile FILE -o TRANSCRIPT [-v] -- PROGRAM [ARG...]\n"+
		"       mlx5cmp pair -profile FILE -port N [-timeout D] [-v] -- PROGRAM [ARG...] -- PROGRAM [ARG...]\n"+
		"       mlx5cmp diff A B")
	os.Exit(2)
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	profile := fs.String("profile", "", "the device profile (JSON)")
	out := fs.String("o", "", "write the transcript to `file` (default: standard output)")
	verbose := fs.Bool("v", false, "log every trapped call to standard error")
	fs.Parse(args)
	argv := fs.Args()
	if *profile == "" || len(argv) == 0 {
		usage()
	}
	t, err := run(*profile, argv, *verbose)
	if t != nil {
		if werr := t.writeFile(*out); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func pairCmd(args []string) error {
	fs := flag.NewFlagSet("pair", flag.ExitOnError)
	var o pairOptions
	fs.StringVar(&o.profile, "profile", "", "the device profile (JSON)")
	fs.IntVar(&o.port, "port", 0, "the TCP `port` the first program listens on")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "kill both programs after this long")
	fs.BoolVar(&o.verbose, "v", false, "log every trapped call to standard error")
	fs.Parse(args)
	rest := fs.Args()
	sep := slices.Index(rest, "--")
	if o.profile == "" || o.port <= 0 || o.port > 65535 || sep < 1 || sep == len(rest)-1 {
		usage()
	}
	return runPair(o, [2][]string{rest[:sep], rest[sep+1:]})
}

func diffCmd(args []string) error {
	if len(args) != 2 {
		usage()
	}
	a, err := readTranscript(args[0])
	if err != nil {
		return err
	}
	b, err := readTranscript(args[1])
	if err != nil {
		return err
	}
	if d := diffTranscripts(a, b); d != "" {
		fmt.Print(d)
		return fmt.Errorf("%s and %s differ", args[0], args[1])
	}
	return nil
}
