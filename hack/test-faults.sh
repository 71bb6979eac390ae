#!/usr/bin/env bash
# RoCEv2 recovery under injected faults, between two VMs (vm pair). Side a
# runs the server, b the client; hack/faultrun attaches internal/faults's XDP
# program on the side named in each case and prints what it dropped or
# corrupted, the change in rxe's hw_counters, and when the command ended.
# rping -V checks every ping's data end to end (RDMA read of the client's
# buffer, RDMA write back, and sends in both directions), so a case passes
# only when every ping arrived intact.
#
#   hack/test-faults.sh [all|short|targeted|cm|measure]   (KERNEL, VM: as in the Makefile)
#
# measure is no pass/fail set: it times a clean run for comparison, and
# retry exhaustion (everything the client receives dropped from 2 s on),
# which rxe does not report within 70 s on 6.1 or 6.12 (docs/reliability.md).
#
# Faults spare QP1 (-data) except where the CM is the subject: a lost MAD is
# retried on the CM's timeouts (seconds), which would hide the data path's
# recovery time.
set -uo pipefail
set_=${1:-all}
# want SET: whether this run includes SET (all includes every one but measure).
want() { [ "$set_" = "$1" ] || { [ "$set_" = all ] && [ "$1" != measure ]; }; }
KERNEL=${KERNEL:-bookworm}
VM=${VM:-bin/vm}
R=$PWD/bin/rdmago F=$PWD/bin/faultrun C=/usr/bin/rping A=10.0.5.1
log=$PWD/bin/test-faults-$KERNEL.log
: >"$log"
fails=0 n=0 t0=$(date +%s)

# pair NAME TIMEOUT A-CMD B-CMD [COUNT REGEX]...: both commands must exit 0
# (b after sleeping 2 s, for a to listen) and each REGEX must match COUNT
# lines of the combined output (COUNT "+" for one or more).
pair() {
	local name=$1 to=$2 a=$3 b=$4 out st t1 bad="" m
	shift 4
	t1=$(date +%s) n=$((n + 1))
	echo "== faults ($KERNEL) $name"
	echo "   [a] $a"
	echo "   [b] sleep 2; $b"
	out=$($VM pair --kernel "$KERNEL" --timeout "$to" -- /bin/sh -c "$a" ::: /bin/sh -c "sleep 2; exec $b" 2>&1)
	st=$?
	{ echo "== $name"; printf '%s\n' "$out"; } >>"$log"
	printf '%s\n' "$out" | grep -E 'faultrun|rping: |error|Error|ERR|vm: pair' | grep -v 'ping data' | sed 's/^/   /'
	[ $st -eq 0 ] || bad="vm pair exited with status $st"
	while [ $# -gt 0 ]; do
		m=$(printf '%s\n' "$out" | grep -cE -- "$2")
		if [ "$1" = + ]; then
			[ "$m" -ge 1 ] || bad="$bad${bad:+; }no line matches '$2'"
		elif [ "$m" -ne "$1" ]; then
			bad="$bad${bad:+; }$m lines match '$2', want $1"
		fi
		shift 2
	done
	if [ "$set_" = measure ]; then
		echo "done $name ($(($(date +%s) - t1)) s)${bad:+: $bad}"
	elif [ -n "$bad" ]; then
		echo "FAIL $name ($(($(date +%s) - t1)) s): $bad"
		fails=$((fails + 1))
	else
		echo "ok   $name ($(($(date +%s) - t1)) s)"
	fi
}

# rping as rdma-core's (c) or rdmago's (r), and its name.
tool() { case $1 in c) echo "$C" ;; r) echo "$R rping" ;; esac; }
who() { case $1 in c) echo "rping" ;; r) echo "rdmago" ;; esac; }

pa='^\[a\] server ping data: rdma-ping-'
pb='^\[b\] ping data: rdma-ping-'
dropped='^\[a\] faultrun: eth0: .* dropped [1-9]'
retried='completer_retry_err \+[1-9]'

if [ "$set_" = measure ]; then
	for c in "c r" "r r"; do
		s=$(tool ${c% *}) k=$(tool ${c#* })
		pair "no fault, rping -S 1000 -C 50: $(who ${c% *}) server, $(who ${c#* }) client" 60s \
			"$F -off -- $s -s -v -V -a $A -C 50 -S 1000" "$F -off -- $k -c -v -V -a $A -C 50 -S 1000" 50 "$pa" 50 "$pb"
	done
	for c in "c c" "c r"; do
		s=$(tool ${c% *}) k=$(tool ${c#* })
		pair "retry exhaustion (measured): all dropped at the $(who ${c#* }) client from 2 s" 90s \
			"$s -s -V -a $A -C 100000 -S 1000" "$F -data -after 2s -timeout 70s -- $k -c -V -a $A -C 100000 -S 1000"
	done
	# The same with a retry count of 6, which rxe counts down (7 is
	# "forever" to rxe): RETRY_EXC_ERR after 7 timeouts.
	pair "retry exhaustion (measured): all dropped at an ib_write_bw --retry_count 6 client from 3 s" 100s \
		"/usr/bin/ib_write_bw -R --retry_count 6 -D 60" \
		"$F -data -after 3s -timeout 80s -- /usr/bin/ib_write_bw -R --retry_count 6 -D 60 $A"
	echo "== test-faults measure ($KERNEL): $n cases, $(($(date +%s) - t0)) s; output in $log"
	exit 0
fi

# Every 100th data packet lost (1%), deterministic: the short set.
if want short; then
for c in "c r" "r c" "r r"; do
	s=$(tool ${c% *}) k=$(tool ${c#* })
	pair "drop every 100th, rping -S 1000 -C 50: $(who ${c% *}) server, $(who ${c#* }) client" 60s \
		"$F -data -every 100 -timeout 50s -- $s -s -v -V -a $A -C 50 -S 1000" "$F -off -- $k -c -v -V -a $A -C 50 -S 1000" \
		50 "$pa" 50 "$pb" 1 "$dropped" + "$retried"
done
fi

[ "$set_" = short ] && { echo "== test-faults short ($KERNEL): $n cases, $fails failed, $(($(date +%s) - t0)) s; output in $log"; exit $((fails > 0)); }

if want all; then

# Random loss, 1%: small and 64 KiB pings.
for c in "c r" "r c" "r r" "c c"; do
	s=$(tool ${c% *}) k=$(tool ${c#* })
	pair "1% loss, rping -S 1000 -C 100: $(who ${c% *}) server, $(who ${c#* }) client" 90s \
		"$F -data -p 0.01 -timeout 80s -- $s -s -v -V -a $A -C 100 -S 1000" "$F -off -- $k -c -v -V -a $A -C 100 -S 1000" \
		100 "$pa" 100 "$pb" 1 "$dropped"
done
for c in "c r" "r r"; do
	s=$(tool ${c% *}) k=$(tool ${c#* })
	pair "1% loss, rping -S 65535 -C 5: $(who ${c% *}) server, $(who ${c#* }) client" 120s \
		"$F -data -p 0.01 -timeout 110s -- $s -s -V -a $A -C 5 -S 65535" "$F -off -- $k -c -V -a $A -C 5 -S 65535" \
		1 "$dropped" 1 '^\[a\] faultrun: command exited 0' 0 'FAIL|data error'
done

# Random loss, 10%. rxe in Linux 6.1 (bookworm) stops retransmitting after a
# few losses at this rate, with rdma-core's rping on both sides as with
# rdmago (docs/reliability.md), so these run on later kernels only.
if [ "$KERNEL" != bookworm ]; then
	for c in "c r" "r r" "c c"; do
		s=$(tool ${c% *}) k=$(tool ${c#* })
		pair "10% loss, rping -S 1000 -C 50: $(who ${c% *}) server, $(who ${c#* }) client" 90s \
			"$F -data -p 0.1 -timeout 80s -- $s -s -v -V -a $A -C 50 -S 1000" "$F -off -- $k -c -v -V -a $A -C 50 -S 1000" \
			50 "$pa" 50 "$pb" 1 "$dropped" + "$retried"
	done
else
	echo "skip 10% loss on bookworm: rxe in 6.1 stalls (rdma-core's tools alike; docs/reliability.md)"
fi

# RDMA write and send streams (perftest's ib_write_bw and ib_send_bw, and
# rdmago's, against each other) under 1% loss at the server, which receives
# the data: out-of-sequence packets make the server NAK and the client go
# back to the lost PSN at once, without waiting for a timeout. perftest
# checks no data; the point is that the streams finish.
bw() { case $1 in c) echo "/usr/bin/ib_$2" ;; r) echo "$R ib_$2" ;; esac; }
bwho() { case $1 in c) echo "perftest" ;; r) echo "rdmago" ;; esac; }
for t in "write_bw 65536 100" "write_bw 64 2000" "send_bw 65536 100" "send_bw 64 2000"; do
	set -- $t
	for c in "c r" "r c"; do
		s=$(bw ${c% *} $1) k=$(bw ${c#* } $1)
		pair "1% loss, $1 -s $2 -n $3: $(bwho ${c% *}) server, $(bwho ${c#* }) client" 90s \
			"$F -data -p 0.01 -timeout 80s -- $s -s $2 -n $3" "$F -off -- $k -s $2 -n $3 $A" \
			2 "^\\[.\\] +$2 +$3 " 1 "$dropped"
	done
done

# A corrupted byte (every 20th data packet): rxe's ICRC check drops it and
# the sender retransmits.
for c in "c r" "r r"; do
	s=$(tool ${c% *}) k=$(tool ${c#* })
	pair "corrupt every 20th, rping -S 1000 -C 50: $(who ${c% *}) server, $(who ${c#* }) client" 90s \
		"$F -data -corrupt -every 20 -timeout 80s -- $s -s -v -V -a $A -C 50 -S 1000" "$F -off -- $k -c -v -V -a $A -C 50 -S 1000" \
		50 "$pa" 50 "$pb" 1 '^\[a\] faultrun: eth0: .* corrupted [1-9]' + "$retried"
done

fi

# Targeted drops, once each: the first ACK the server receives (for its
# RDMA write or send), its first RDMA read response, and with 64 KiB pings
# the last packet of a multi-packet read response (at the server) and of a
# multi-packet RDMA write (at the client, which the server writes to).
# A lost ACK needs no retransmission when a later, cumulative ACK covers it
# before the timeout, so that case asks only that nothing else goes wrong.
if want targeted; then
for t in "a ack 1000 -" "a read_response_only 1000 +" "a read_response_last 65535 +" "b write_last 65535 +"; do
	set -- $t
	rr=("$4" "$retried")
	[ "$4" = - ] && rr=()
	fa="$F -off --" fb="$F -off --"
	if [ "$1" = a ]; then fa="$F -opcode $2 -limit 1 -timeout 80s --"; else fb="$F -opcode $2 -limit 1 -timeout 80s --"; fi
	pair "first $2 dropped at $1, rping -S $3 -C 5: rdmago server, rdmago client" 90s \
		"$fa $R rping -s -V -a $A -C 5 -S $3" "$fb $R rping -c -V -a $A -C 5 -S $3" \
		1 "^\\[$1\\] faultrun: eth0: .* dropped 1 " "${rr[@]}"
done
fi

# rdma_cm: the first REQ (at the server), REP (at the client) or RTU (at
# the server) lost. The CM resends it after its response timeout and the
# connection comes up. A lost DREQ is not here: rping (rdma-core's and
# rdmago's) destroys its ID right after disconnecting, which stops the CM
# resending the DREQ, so the server is never told (docs/reliability.md).
if want cm; then
	for t in "a REQ" "b REP" "a RTU"; do
		set -- $t
		fa="$F -off --" fb="$F -off --"
		if [ "$1" = a ]; then fa="$F -mad $2 -limit 1 -timeout 80s --"; else fb="$F -mad $2 -limit 1 -timeout 80s --"; fi
		pair "rdma_cm: first $2 dropped at $1, rping -C 5: rdmago server, rdmago client" 90s \
			"$fa $R rping -s -v -V -a $A -C 5" "$fb $R rping -c -v -V -a $A -C 5" \
			5 "$pa" 5 "$pb" 1 "^\\[$1\\] faultrun: eth0: .* dropped 1 "
	done
fi

echo "== test-faults ($KERNEL): $n cases, $fails failed, $(($(date +%s) - t0)) s; output in $log"
[ $fails -eq 0 ]
