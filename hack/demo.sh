#!/bin/sh
# The demo, run inside the soft-RoCE VM by `make demo`: rdmago, a pure-Go
# verbs stack, opens the RDMA device the VM created, prints what it knows,
# and exchanges messages with rdma-core's own C programs.
set -e
rdmago=${1:?usage: demo.sh path/to/rdmago}
gid=${RDMAGO_GID_INDEX:-1}
ip=10.0.2.15

echo "== kernel $(uname -r); RDMA devices: $(ls /sys/class/infiniband | tr '\n' ' ')"
echo
echo "== rdmago devinfo -v   (Go, no cgo, no libibverbs)"
"$rdmago" devinfo -v
echo "== the same query through rdma-core's ibv_devinfo -v, compared line by line"
if /usr/bin/ibv_devinfo -v > /tmp/c.txt && "$rdmago" devinfo -v > /tmp/go.txt && cmp -s /tmp/c.txt /tmp/go.txt; then
	echo "identical: $(wc -l < /tmp/go.txt) lines"
else
	echo "DIFFERENT:"
	diff /tmp/c.txt /tmp/go.txt || true
	exit 1
fi

# pingpong: one side listens on TCP 18515 for the address exchange, then the
# two move messages over RDMA; -c checks every payload byte.
pingpong() { # server-command client-command label
	echo
	echo "== $3"
	$1 > /tmp/server.txt 2>&1 &
	server=$!
	sleep 1
	if $2 > /tmp/client.txt 2>&1 && wait $server; then
		sed 's/^/   server: /' /tmp/server.txt
		sed 's/^/   client: /' /tmp/client.txt
	else
		echo "FAILED"; cat /tmp/server.txt /tmp/client.txt; exit 1
	fi
}
pingpong "$rdmago pingpong -g $gid -n 1000 -c" "/usr/bin/ibv_rc_pingpong -g $gid -n 1000 -c $ip" \
	"RC pingpong: rdmago server (Go) <-> ibv_rc_pingpong client (C), 1000 round trips, data checked"
pingpong "/usr/bin/ibv_ud_pingpong -g $gid -n 1000 -c" "$rdmago pingpong --type ud -g $gid -n 1000 -c $ip" \
	"UD pingpong: ibv_ud_pingpong server (C) <-> rdmago client (Go)"
pingpong "$rdmago pingpong --type srq -q 4 -g $gid -n 1000 -e" "$rdmago pingpong --type srq -q 4 -g $gid -n 1000 -e $ip" \
	"SRQ pingpong, event mode: rdmago <-> rdmago, 4 QPs sharing one receive queue"
pingpong "$rdmago rping -s -a $ip -v" "$rdmago rping -c -a $ip -C 5 -V -v" \
	"rping over rdma_cm: rdmago server <-> rdmago client, 5 pings, each one verified (-V)"
pingpong "$rdmago rping -s -a $ip -v" "/usr/bin/rping -c -a $ip -C 5 -V -v" \
	"rping over rdma_cm: rdmago server (Go) <-> rdma-core's rping client (C)"
pingpong "$rdmago server -s $ip" "/usr/bin/rdma_client -s $ip" \
	"rdma_verbs.h calls: rdmago server (Go: RegMsgs, PostRecv, GetRecvComp, PostSend) <-> rdma_client (C)"
echo
echo "== done: the Go verbs stack and rdma-core interoperate on $(uname -r)"
