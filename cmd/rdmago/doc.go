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
package main
