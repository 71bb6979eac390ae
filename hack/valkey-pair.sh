#!/bin/sh
# One side of make test-pair's Valkey case (vm pair): valkey-server with its
# RDMA transport in VM a, the Go client in VM b.
#
#   hack/valkey-pair.sh server VALKEY_BIN_DIR
#   hack/valkey-pair.sh client RDMAGO_BINARY
#
# The client runs rdmago valkey-benchmark over RDMA (every reply checked):
# SET and GET of 1 KiB values from 4 clients, 1.5 MB values that wrap the
# server's 1 MiB receive buffer, and valkey's rdma-test sequence; then it
# stops the server (SHUTDOWN over TCP, by curl's telnet://, which both VMs'
# roots have), so that both sides end. Its exit status is the first
# failure's. POSIX sh: the arm64 guest's root has dash, not bash.
set -u
A=10.0.5.1 TCP=6379 RDMA=6380
case ${1:-} in
server)
	dir=$(mktemp -d)
	exec "$2/valkey-server" --bind "$A" --port "$TCP" --rdma-bind "$A" --rdma-port "$RDMA" \
		--protected-mode no --save '' --appendonly no --dir "$dir" --loglevel warning
	;;
client)
	R=$2 st=0
	i=0
	# QUIT: +OK, and the server closes, which ends curl.
	# (The arm64 guest's root has no grep: case does the matching.)
	until case $(printf 'QUIT\r\n' | curl -s --max-time 2 "telnet://$A:$TCP") in +OK*) true ;; *) false ;; esac; do
		i=$((i + 1))
		[ $i -lt 20 ] || { echo "FAILED: valkey-server does not answer on $A:$TCP"; exit 1; }
		sleep 1
	done
	run() {
		echo "+ rdmago valkey-benchmark $*"
		"$R" valkey-benchmark --rdma -h "$A" -p "$RDMA" "$@" || { echo "FAILED: status $?"; st=1; }
	}
	run -c 4 -n 1000 -d 1024
	run -c 2 -n 20 -d 1500000 -P 2
	run -t rdma-test -c 2 -n 500 -d 1024
	# SHUTDOWN closes the connection without a reply.
	printf 'SHUTDOWN NOSAVE\r\n' | curl -s --max-time 5 "telnet://$A:$TCP"
	exit $st
	;;
*)
	echo "usage: $0 server VALKEY_BIN_DIR | client RDMAGO_BINARY" >&2
	exit 2
	;;
esac
