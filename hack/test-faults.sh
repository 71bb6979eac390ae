#!/usr/bin/env bash
# RoCEv2 recovery under injected faults, between two VMs (vm pair). Side a
# runs the server, b the client; hack/faultrun attaches internal/faults's XDP
# program on the side named in each case and prints what it dropped or
# corrupted, the change in rxe's hw_counters, and when the command ended.
# rping -V checks every ping's data end to end (RDMA read of the client's
# buffer, RDMA write back, and sends in both directions), so a case passes
# only when every ping arrived intact.
#
#   hack/test-faults.sh [all|short|targeted|cm|keepalive|egress|measure|death]   (KERNEL, VM: as in the Makefile)
#
# measure is no pass/fail set: it times a clean run for comparison, and
# retry exhaustion (everything the client receives dropped from 2 s on),
# which rxe does not report within 70 s on 6.1 or 6.12 (docs/reliability.md).
# death is none either: how long a server takes to notice that its client
# died (kill -9, SIGSTOP, link down, power-off; while pinging and idle),
# for rdma-core's rping, rdmago's, and rdmago's with -K 2000 (keepalive).
#
# Faults spare QP1 (-data) except where the CM is the subject: a lost MAD is
# retried on the CM's timeouts (seconds), which would hide the data path's
# recovery time.
set -uo pipefail
set_=${1:-all}
# want SET: whether this run includes SET (all includes every one but
# measure and death).
want() { [ "$set_" = "$1" ] || { [ "$set_" = all ] && [ "$1" != measure ] && [ "$1" != death ]; }; }
KERNEL=${KERNEL:-bookworm}
VM=${VM:-bin/vm}
R=$PWD/bin/rdmago F=$PWD/bin/faultrun C=/usr/bin/rping A=10.0.5.1
log=$PWD/bin/test-faults-$KERNEL.log
: >"$log"
fails=0 n=0 t0=$(date +%s)

# pair NAME TIMEOUT A-CMD B-CMD [COUNT REGEX]...: both commands must exit 0
# (b started once a listens: vm pair --b-after-listen) and each REGEX must
# match COUNT lines of the combined output (COUNT "+" for one or more).
pair() {
	local name=$1 to=$2 a=$3 b=$4 out st t1 bad="" m
	shift 4
	t1=$(date +%s) n=$((n + 1))
	echo "== faults ($KERNEL) $name"
	echo "   [a] $a"
	echo "   [b] (once a listens) $b"
	out=$($VM pair --kernel "$KERNEL" --b-after-listen --timeout "$to" -- /bin/sh -c "$a" ::: /bin/sh -c "exec $b" 2>&1)
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

# Peer death: the server (the survivor, a) pings a client (the peer, b) of
# the same program, and the peer dies one of four ways 2 s into the pings
# (traffic) or, idle, 3 s after being SIGSTOPped at its first ping line:
#   kill    kill -9: its kernel destroys its cm_id and QP (a DREQ goes out)
#   stop    SIGSTOP: its kernel goes on answering (idle: stopped from the
#           first ping on, the stop is the fault)
#   down    ip link set eth0 down in b; idle, the client is continued
#           (SIGCONT) after that, to see whether its own tool notices
#   off     b's command exits while the client runs, and the VM's init
#           powers off at once (poweroff -f: reboot(2), kernel_power_off,
#           the path of sysrq o) and vm pair kills b's QEMU. Not sysrq
#           itself: a VM whose command never exits counts as failed, and
#           vm pair would stop a 3 s later.
# Detection is timed on a's clock: each line of both sides is stamped with
# its guest's /proc/uptime (the programs run under stdbuf -oL), detection
# is the survivor's first line after its last ping line, and the fault is
# b's fault line moved to a's clock by the offset between the two clocks
# at the first ping (death_report). The survivor is stopped 48 s after it
# started, about 42 s after the fault. a ends with status 3, so that vm pair
# stops b 3 s later instead of waiting out b's schedule (b must stay up
# longer than a's limit for stop and down).
if [ "$set_" = death ]; then
	# Perl puts the guest's /proc/uptime before each line, unbuffered. A
	# shell loop (read, echo) fell up to 2 s behind 200 ping lines a
	# second when the host was busy, and its stamps with it.
	stamp='BEGIN { $| = 1 } open U, "/proc/uptime"; print +(split / /, <U>)[0], " ", $_;'
	# death_report reads a run's output. The survivor: its last ping line,
	# and the first two lines after it (or "exit 124": stopped at the
	# limit). The fault's time on a's clock: b's fault line plus the offset of the
	# two clocks at the first ping (a prints a ping's line a few
	# milliseconds before b does; later lines may queue behind others).
	# Not the last ping line itself: pings can pause (rdmago -K 2000
	# paused for 0.8 s at times), and idle, b's 3 s sleep starts late. The
	# peer: what it printed after the fault, on its own clock.
	death_report() {
		awk '
			function num(s) { sub(/.*rdma-ping-/, "", s); sub(/:.*/, "", s); return s + 0 }
			/^\[a\] [0-9.]+ / { t = $2; l = substr($0, length($2) + 6)
				if (l ~ /ping data: rdma-ping-/) { n++; last = t; if (first == "") first = t; at[num(l)] = t; det = det2 = ""; next }
				if (l ~ /^exit [0-9]+$/) ex = l
				if (n && det == "") { det = l; dt = t }
				else if (n && det2 == "" && l !~ /^exit /) det2 = " | " l
				next }
			/^\[b\] [0-9.]+ .*ping data: rdma-ping-/ { bt[num($0)] = $2; next }
			/^\[b\] [0-9.]+ fault: / { bf = $2; print "   " $0; next }
			/^\[b\] [0-9.]+ / && bf != "" { printf "   peer   +%.2f s: %s\n", $2 - bf, substr($0, length($2) + 6) }
			END {
				if (!n) { print "   survivor: no ping"; exit }
				for (k in at) if ((k in bt) && (best == "" || k + 0 < best + 0)) best = k
				if (best == "" || bf == "") { print "   survivor: no ping or no fault on b"; exit }
				f = bf + at[best] - bt[best]
				printf "   survivor: %d pings in %.2f s, the last at %.2f; fault at %.2f (offset from ping %d)\n", n, last - first, last, f, best
				if (det ~ /^exit 124$/) printf "   survivor: not detected within %.1f s (stopped at its limit)\n", dt - f
				else printf "   survivor: +%.2f s: %s%s (%s)\n", dt - f, det, det2, ex
			}'
	}
	# death FAULT MODE SURVIVOR (c, r, or k: rdmago with -K 2000)
	death() {
		local f=$1 m=$2 s=$3 srv cli what fault mark wait=2 idle="" a b out t1 try
		case $s in
		c) srv=$C cli=$C what="rping server, rping client" ;;
		r) srv="$R rping" cli="$R rping" what="rdmago server, rdmago client" ;;
		k) srv="$R rping -K 2000" cli="$R rping" what="rdmago -K 2000 server, rdmago client" ;;
		esac
		case $f in
		kill) fault='kill -9 $p' ;;
		stop) fault='kill -STOP $p' ;;
		down) fault='/usr/sbin/ip link set eth0 down' ;;
		off) fault='exit 0' ;;
		esac
		if [ "$m" = idle ]; then
			idle='open P, "/tmp/pid"; chomp($p = <P>); kill "STOP", $p; ' wait=3
			[ "$f" = stop ] && wait=0 fault=:
			[ "$f" = down ] && fault="$fault; kill -CONT \$p"
		fi
		a="{ stdbuf -oL timeout 48 $srv -s -v -V -a $A -C 100000 -S 64 2>&1; echo \"exit \$?\"; } | /usr/bin/perl -ne '$stamp'; exit 3"
		# b's stamping also marks the first ping line, and idle stops the
		# client there. The client starts 1 s after it, so that the first
		# ping line, the one the clocks are matched at, finds Perl running.
		b="{ sleep 1; stdbuf -oL $cli -c -v -V -a $A -C 100000 -S 64 2>&1 & echo \$! >/tmp/pid; wait \$!; echo \"client exit \$?\"; } |"
		b="$b /usr/bin/perl -ne '$stamp"' if (!$f && /ping data/) { $f = 1; '"$idle"'open F, ">/tmp/first"; close F }'"' &"
		b="$b"' i=0; until [ -e /tmp/first ]; do i=$((i + 1)); [ $i -le 300 ] || exit 0; sleep 0.05; done; read -r p </tmp/pid;'
		# The fault line comes once the fault is done (ip, a process
		# started over 9p, took up to 0.3 s), but before the power-off.
		mark="read -r up _ </proc/uptime; echo \"\$up fault: $f ($m)\""
		if [ "$f" = off ]; then fault="$mark; $fault"; else fault="$fault; $mark"; fi
		b="$b sleep $wait; $fault; sleep 55; kill -CONT \$p; kill -9 \$p; exit 0"
		t1=$(date +%s) n=$((n + 1))
		echo "== death ($KERNEL) $f, $m: $what"
		for try in 1 2; do
			out=$($VM pair --kernel "$KERNEL" --b-after-listen --timeout 100s -- /bin/sh -c "$a" ::: /bin/sh -c "$b" 2>&1)
			{ echo "== death $f $m $s"; echo "   [a] $a"; echo "   [b] (once a listens) $b"; printf '%s\n' "$out"; } >>"$log"
			# On a busy host the client has come before the server
			# listened (REJECTED): once more.
			printf '%s\n' "$out" | grep -q '^\[a\] [0-9.]* server ping data' && break
			[ $try = 1 ] && echo "   no ping: again"
		done
		printf '%s\n' "$out" | death_report
		printf '%s\n' "$out" | grep -E '^vm: pair failed' | grep -v '^vm: pair failed: \[a\] exit status 3 (/bin/sh); \[b\] stopped' | sed 's/^/   /'
		echo "done $f $m $s ($(($(date +%s) - t1)) s)"
	}
	# SURVIVORS, FAULTS and MODES choose a part of the set (all of it by
	# default).
	sv=${SURVIVORS:-c r k}
	if [[ " $sv " = *" k "* ]] && ! "$R" help rping 2>&1 | grep -q -- '-K'; then
		echo "skip rdmago rping -K 2000: this bin/rdmago has no -K"
		sv=${sv//k/}
	fi
	for f in ${FAULTS:-kill stop down off}; do
		for m in ${MODES:-traffic idle}; do
			for s in $sv; do death $f $m $s; done
		done
	done
	echo "== test-faults death ($KERNEL): $n cases, $(($(date +%s) - t0)) s; output in $log"
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
# resending the DREQ, so the server is never told (docs/reliability.md);
# make test-pair's TestPairLostDREQ shows the CM resending it to a client
# that waits, and the keepalive ending the server's side otherwise.
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

# The keepalive bounds what rxe does not: everything a side receives dropped
# from some point on (its link gone, as it sees it). An RDMA write stream
# (perftest's -D mode, rdmago's ib_write_bw with --keepalive 2000) fails
# flushed within the bound, where without it the stream waits for ever
# (docs/reliability.md, Retry exhaustion); so does rping's server with -K,
# which exits 255. faultrun's time after the fault must stay under 4 s.
within4='command exited [0-9]+ after [0-9.]+s, [0-3][.][0-9]+s after the fault began'
# Both ends fail here, as they should: each command's status is printed
# instead of returned, for vm pair not to count it (b's through a shell of
# its own: pair execs b's command).
if want keepalive; then
	pair "keepalive: all dropped at an ib_write_bw -R -D 30 --keepalive 2000 client from 4 s" 90s \
		"$R ib_write_bw -R -D 30; echo \"server status \$?\"" \
		"/bin/sh -c '$F -after 4s -timeout 60s -- $R ib_write_bw -R -D 30 --keepalive 2000 $A; echo client status \$?'" \
		1 '^\[b\]  Keepalive: .*connection timed out' 1 "^\\[b\\] faultrun: $within4" 1 '^\[b\] client status 1$'
	pair "keepalive: all dropped at an rping -K 2000 server from 4 s, rdmago client" 90s \
		"$F -after 4s -timeout 60s -- $R rping -s -v -V -a $A -C 100000 -S 64 -K 2000; echo \"server status \$?\"" \
		"/bin/sh -c '$R rping -c -V -a $A -C 100000 -S 64; echo client status \$?'" \
		1 '^\[a\] server: cm: .*connection timed out' 1 "^\\[a\\] faultrun: $within4" 1 '^\[a\] server status 255$'
fi

# Drops on the sending side (TCX egress, Linux 6.6 and later): the client's
# own last packet of a 64 KiB RDMA read response, once.
if want egress; then
	if [ "$KERNEL" != bookworm ]; then
		pair "egress: the client's first read_response_last dropped as it leaves, rping -S 65535 -C 5: rdmago both" 90s \
			"$R rping -s -V -a $A -C 5 -S 65535" \
			"$F -egress -opcode read_response_last -limit 1 -timeout 80s -- $R rping -c -V -a $A -C 5 -S 65535" \
			1 '^\[b\] faultrun: fault on eth0 [(]TCX egress[)]' 1 '^\[b\] faultrun: eth0: .* dropped 1 ' 1 '^\[b\] faultrun: command exited 0'
	else
		echo "skip egress on bookworm: TCX came with Linux 6.6 (faults.AttachEgress says so)"
	fi
fi

echo "== test-faults ($KERNEL): $n cases, $fails failed, $(($(date +%s) - t0)) s; output in $log"
[ $fails -eq 0 ]
