#!/bin/busybox sh
# /init of the rdmago test VM (PID 1), run by the static busybox of the
# initramfs that hack/vm builds. It loads the modules, builds a root from the
# host's (read-only 9p + tmpfs overlay), sets up dummy0 and rxe0, runs the
# command the host wrote to the I/O share, and powers off.
#
# Protocol with the host (hack/vm/guest.go), over the 9p share "rdmagoio":
#   config.sh   host -> guest  shell variables VM_RDMA, VM_SHELL, VM_RW, VM_MAC,
#                              VM_ADDR, VM_GID, VM_DYNDBG, VM_ARCHROOT, VM_RDMAGO,
#                              VM_TTY, VM_WAITGO, VM_LISTENWATCH
#   cmd.sh      host -> guest  the command: exports, cd, exec (run by the host's /bin/sh);
#                              /init puts "export RDMAGO_GID_INDEX=N" before it
#   ready       guest -> host  /proc/uptime when ready to start (VM_WAITGO=1 only)
#   go          host -> guest  start now (VM_WAITGO=1 only)
#   started     guest -> host  /proc/uptime when the command starts
#   listening   guest -> host  /proc/uptime when a listener is seen (VM_LISTENWATCH=1)
#   stdout, stderr             the command's output, streamed by the host
#   exit        guest -> host  the command's exit status (renamed into place)
# Setup failures are reported as one "vm-init: error: ..." line on the
# console, which the host picks up as the cause.

# One line at once: under KVM the host takes a silent guest for a broken KVM.
echo "vm-init: started"
/bin/busybox --install -s /bin
export PATH=/bin

die() {
	echo "vm-init: error: $*"
	poweroff -f
	exit 1
}

mount -t proc proc /proc || die "cannot mount /proc"
mount -t sysfs sysfs /sys || die "cannot mount /sys"
mount -t devtmpfs devtmpfs /dev || die "cannot mount /dev"

# With "rdmago.trace" on the kernel command line (vm run --console), print
# the uptime at each stage, to see where boot time goes.
trace() { :; }
grep -qw rdmago.trace /proc/cmdline && trace() { read -r up _ </proc/uptime && echo "vm-init: [$up] $*"; }
trace "init started"

while read -r mod params; do
	# shellcheck disable=SC2086 # params are separate words
	insmod "/modules/$mod" $params || die "insmod $mod failed"
done </modules/order
trace "modules loaded"

P9=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $P9 rdmagoio /io || die "cannot mount the I/O share (9p rdmagoio)"
VM_RDMA=1
VM_SHELL=0
VM_RW=
VM_MAC=     # empty: rxe0 on dummy0; else on the NIC with this MAC (vm pair)
VM_ADDR=10.0.2.15/24
VM_GID=0000:0000:0000:0000:0000:ffff:0a00:020f # VM_ADDR's RoCE v2 GID
VM_DYNDBG=  # dynamic debug queries ("module rdma_rxe +p"), for the kernel log
VM_ARCHROOT=0 # 1: a foreign guest; the 9p share archroot goes over the host root
VM_RDMAGO=  # an rdmago binary that adds rxe0 (a foreign guest)
VM_TTY=ttyS0
VM_WAITGO=0 # 1: wait for /io/go before the command (vm pair)
VM_LISTENWATCH=0 # 1: write /io/listening at the first rdma_cm or TCP listener
. /io/config.sh || die "cannot read /io/config.sh"
trace "I/O share mounted"

# The host's root, read-only; cache=loose because nothing changes it under us
# for the VM's short life, and it makes repeated lookups cheap.
mount -t 9p -o $P9,cache=loose,ro hostroot /lower || die "cannot mount the host root (9p hostroot)"
LOWER=/lower
if [ "$VM_ARCHROOT" = 1 ]; then
	# The guest's own architecture's programs and libraries (hack/vm
	# archroot.go), over the host's tree.
	mount -t 9p -o $P9,cache=loose,ro archroot /arch || die "cannot mount the guest's root layer (9p archroot)"
	LOWER=/arch:/lower
fi
mount -t tmpfs -o mode=0755 tmpfs /rw || die "cannot mount tmpfs for the overlay"
mkdir -p /rw/upper /rw/work
R=/newroot
mount -t overlay -o lowerdir=$LOWER,upperdir=/rw/upper,workdir=/rw/work overlay $R ||
	die "cannot mount the overlay root"
mount -t proc proc $R/proc || die "cannot mount proc in the root"
mount -t sysfs sysfs $R/sys || die "cannot mount sysfs in the root"
mount -t devtmpfs devtmpfs $R/dev || die "cannot mount devtmpfs in the root"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o mode=0620,ptmxmode=0666 devpts $R/dev/pts || die "cannot mount devpts"
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm || die "cannot mount /dev/shm"
mount -t tmpfs -o mode=0755 tmpfs $R/run || die "cannot mount /run"
trace "root ready"

# Extra writable shares (vm run --rw DIR), at the same path as on the host.
while read -r tag path; do
	[ -n "$tag" ] || continue
	mkdir -p "$R$path" && mount -t 9p -o $P9 "$tag" "$R$path" || die "cannot mount $path (9p $tag)"
done <<EOF
$VM_RW
EOF

if [ -n "$VM_DYNDBG" ]; then
	mount -t debugfs debugfs /sys/kernel/debug || die "cannot mount debugfs for VM_DYNDBG"
	echo "$VM_DYNDBG" >/sys/kernel/debug/dynamic_debug/control || die "dynamic debug rejected: $VM_DYNDBG"
fi

# Networking: rxe0 sits on dummy0 (which dummy.ko made by itself), or, in
# vm pair, on the virtio-net NIC with the MAC the host gave it, whose other
# end is the peer VM. busybox's ip is enough for this; the host's rdma tool
# does the rest.
ip link set lo up || die "cannot bring lo up"
NETDEV=dummy0
if [ -n "$VM_MAC" ]; then
	NETDEV=
	i=0
	while [ -z "$NETDEV" ]; do
		for d in /sys/class/net/*; do
			read -r mac 2>/dev/null <"$d/address" && [ "$mac" = "$VM_MAC" ] && NETDEV=${d##*/}
		done
		i=$((i + 1))
		[ -n "$NETDEV" ] || [ $i -le 100 ] || die "no network interface has MAC $VM_MAC after 2s"
		[ -n "$NETDEV" ] || usleep 20000
	done
fi
ip addr add "$VM_ADDR" dev $NETDEV || die "cannot give $NETDEV the address $VM_ADDR"
ip link set $NETDEV up || die "cannot bring $NETDEV up"
if [ -n "$VM_MAC" ]; then
	# A NIC sends once it has carrier (virtio-net has it from the start);
	# its operstate follows up to a second later (linkwatch), which
	# "ip link" shows as DOWN meanwhile: harmless. 250 x 20 ms.
	i=0
	until read -r carrier 2>/dev/null </sys/class/net/$NETDEV/carrier && [ "$carrier" = 1 ]; do
		i=$((i + 1))
		[ $i -le 250 ] || die "$NETDEV has no carrier 5s after ip link set up"
		usleep 20000
	done
fi
trace "$NETDEV up"

GID_INDEX=
if [ "$VM_RDMA" = 1 ]; then
	RDMA=
	for p in /usr/bin/rdma /usr/sbin/rdma /bin/rdma /sbin/rdma; do
		[ -x "$R$p" ] && RDMA=$p && break
	done
	[ -n "$RDMA" ] || die "the host has no rdma tool (install iproute2: vm deps)"
	# A foreign guest adds rxe0 with rdmago's port of the rdma tool, of its
	# own architecture, so that its setup needs nothing of iproute2's.
	[ -z "$VM_RDMAGO" ] || RDMA="$VM_RDMAGO rdma"
	# An absolute path: busybox chroot would run its own applet for a bare name.
	chroot $R $RDMA link add rxe0 type rxe netdev $NETDEV || die "rdma link add rxe0 type rxe netdev $NETDEV failed"
	trace "rxe0 added"
	# The command may only start once the RoCE v2 GID of VM_ADDR exists. It
	# lands at index 1 (index 0 is the IPv6 link-local one), but look at the
	# first few and tell the command where it is; read is a shell builtin, so
	# this costs no processes. 500 x 20 ms.
	G=/sys/class/infiniband/rxe0/ports/1/gids
	i=0
	while [ -z "$GID_INDEX" ]; do
		for n in 0 1 2 3 4 5 6 7; do
			read -r gid 2>/dev/null <$G/$n && [ "$gid" = "$VM_GID" ] && GID_INDEX=$n && break
		done
		i=$((i + 1))
		[ -n "$GID_INDEX" ] || [ $i -le 500 ] || die "rxe0 has no GID $VM_GID ($VM_ADDR) at index 0-7 after 10s"
		[ -n "$GID_INDEX" ] || usleep 20000
	done
	trace "rxe0 GID ready at index $GID_INDEX"
fi

mkdir -p $R/run/rdmago
{
	[ -z "$GID_INDEX" ] || echo "export RDMAGO_GID_INDEX=$GID_INDEX"
	cat /io/cmd.sh
} >$R/run/rdmago/cmd.sh || die "cannot copy the command script"
if [ "$VM_WAITGO" = 1 ]; then
	# vm pair: say this VM is ready, and start only when the host says
	# both are, so that a client's "sleep 2" before it connects counts
	# from its server's start rather than from its own VM's boot. /io
	# has no cache: the host's file shows at once.
	cat /proc/uptime >/io/ready
	trace "ready, waiting for the peer VM"
	until [ -e /io/go ]; do usleep 10000; done
fi
cat /proc/uptime >/io/started
if [ "$VM_LISTENWATCH" = 1 ]; then
	# vm pair --b-after-listen: tell the host when the command (nothing
	# else here listens) has a listener, for the peer's client to start:
	# an rdma_cm ID in LISTEN, or a TCP socket in LISTEN (st 0A: perftest
	# without -R, ibv_*_pingpong). Every 50 ms; the TCP check is awk on
	# /proc, the rdma_cm one a fork of the rdma tool, cheap beside a
	# server's start under TCG.
	(
		until awk '$4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null ||
			{ [ -n "$RDMA" ] && chroot $R $RDMA res show cm_id 2>/dev/null | grep -q ' state LISTEN '; }; do
			usleep 50000
		done
		cat /proc/uptime >/io/listening
	) &
fi

# env -i: the command gets exactly the environment cmd.sh exports, nothing
# of init's. /bin/sh here is the host's shell.
if [ "$VM_SHELL" = 1 ]; then
	setsid -c env -i /bin/busybox chroot $R /bin/sh /run/rdmago/cmd.sh </dev/$VM_TTY >/dev/$VM_TTY 2>&1
	rc=$?
else
	env -i /bin/busybox chroot $R /bin/sh /run/rdmago/cmd.sh </dev/null >/io/stdout 2>/io/stderr
	rc=$?
fi
echo $rc >/io/exit.tmp && mv /io/exit.tmp /io/exit
poweroff -f
