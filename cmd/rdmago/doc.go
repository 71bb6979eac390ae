// Command rdmago is a tool for RDMA devices built on the pure-Go verbs
// library github.com/rdmago/rdma: one static binary, no cgo, no
// libibverbs, that does what the rdma-core and perftest command-line tools
// do.
//
// Usage:
//
//	rdmago <command> [arguments]
//
// The commands are:
//
//	devinfo   print the attributes of RDMA devices, as ibv_devinfo does
//	pingpong  exchange messages with a peer, as ibv_{rc,uc,ud,srq}_pingpong do
//	perf      perftest's bandwidth and latency tests (write, read, send, atomic)
//	rping     ping a peer over rdma_cm with RDMA reads and writes, as rping does
//	server    the rdma_server side of the rdma_verbs.h exchange
//	client    the rdma_client side of the rdma_verbs.h exchange
//	xserver   the rdma_xserver side: one message received over RC or XRC
//	xclient   the rdma_xclient side: one message sent over RC or XRC
//	valkey-benchmark  SET and GET against valkey-server over RDMA or TCP
//	help      list the commands, or show one command's usage
//	version   print the version of rdmago
//
// "rdmago help <command>" and "rdmago <command> -h" show a command's usage.
//
// # devinfo
//
//	rdmago devinfo [-d dev] [-i port] [-l] [-v]
//
// devinfo prints what rdma-core's ibv_devinfo (v44.0) prints, byte for
// byte: each device's attributes and those of its ports, everything the
// device reports with -v (capability flags decoded, on-demand paging, TSO,
// RSS, packet pacing, tag matching, the GID table), with ibv_devinfo's
// messages and exit statuses. The options are ibv_devinfo's:
//
//	-d, --ib-dev=<dev>     use IB device <dev> (default: every device)
//	-i, --ib-port=<port>   use port <port> of the device (default: all ports)
//	-l, --list             print only the device names
//	-v, --verbose          print all the attributes of the device(s)
//
// As with the C tools, short options may be bundled ("-lv") and values
// glued on ("-drxe0"); a port number may be written in C's notations
// ("0x1"). Unlike ibv_devinfo, "-h" prints the usage and exits with 0.
//
// # pingpong
//
//	rdmago pingpong [--type rc|uc|ud|srq] [options] [server]
//	rdmago rc_pingpong | uc_pingpong | ud_pingpong | srq_pingpong [options] [server]
//
// pingpong speaks the out-of-band TCP exchange of rdma-core's
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
// (v44.0), so either side may be the C program: without a server name it
// listens, with one it connects. It takes their options (-p port, -d device,
// -i port, -s size, -m mtu, -r rx depth, -n iterations, -l service level,
// -e events, -g GID index, -c check the data, -q number of QPs with srq) and
// prints their lines ("local address: …", "N bytes in X seconds = Y
// Mbit/sec"). With -e it waits for completions on a completion channel
// instead of polling.
//
// # perf
//
//	rdmago perf write_bw|write_lat|read_bw|read_lat|send_bw|send_lat|atomic_bw|atomic_lat [options] [server]
//	rdmago ib_write_bw … (the perftest program names work too)
//
// perf speaks perftest's TCP exchange, so either side may be perftest's
// program, and takes its options (-d -i -x -s -a -n -D -q -F -p -c -t -r -l
// -Q -e --report_gbits and more) and prints its tables; --json prints the
// same figures as JSON. The rdma_cm exchange (-R) is not supported yet.
// While a test's measured loop runs, the process's other threads (the Go
// runtime's) are SCHED_BATCH, so that their wake-ups do not preempt the
// loop or its peer mid-tick; docs/performance.md says why.
//
// # rping, server, client
//
//	rdmago rping -s|-c -a addr [-p port] [-C count] [-S size] [-v] [-V] [-P] [-d]
//	rdmago server [-s addr] [-p port]
//	rdmago client -s addr [-p port]
//	rdmago xserver [-p port] [-c r|x] [-v]
//	rdmago xclient [-s addr] [-p port] [-c r|x]
//
// rping speaks rdma-core's rping protocol over rdma_cm (the client
// advertises a source and a sink buffer; the server RDMA-reads the one and
// writes the other), with rping's options and output. server and client are
// rdma_server and rdma_client: one message each way over an rdma_cm
// endpoint, using the rdma_verbs.h calls of package cm. xserver and
// xclient are rdma_xserver and rdma_xclient: one message from the client
// to the server, over RC (-c r) or XRC (-c x: the client's XRC send QP
// names the server's XRC SRQ, whose number the server sends when it
// accepts); a device without XRC, such as rxe, refuses -c x as it refuses
// the C programs.
//
// # valkey-benchmark
//
//	rdmago valkey-benchmark [-h host] [-p port] [-c clients] [-n requests]
//	       [-d size] [-P pipeline] [-t set,get|rdma-test] [--rdma] [--csv]
//
// valkey-benchmark sets and reads back keys on a Valkey server, over its
// RDMA transport with --rdma (package valkeyrdma; valkey-server
// --rdma-port) and over TCP without, and prints each test's requests per
// second. Every client connects, and builds its keys and values, before
// the clock starts; every reply is checked, every GET against the value
// set. The options are valkey-benchmark's, -n counting all clients'
// requests. -t rdma-test runs instead the sequence of valkey's RDMA test
// client (tests/rdma/rdma-test) on each client, with its progress lines,
// which is how make bench sets the two clients side by side.
package main
