package doctor

// The checks of "rdmago doctor" other than the kernel ABI's
// (abi.go). Each returns findings and reads only through doctorEnv,
// so that tests run it against a fake /sys, /dev and /proc.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/uverbs"
)

// hostDoctorEnv is the environment of the running process.
func hostDoctorEnv() *doctorEnv {
	return &doctorEnv{
		sysRoot:  "/sys",
		devRoot:  "/dev/infiniband",
		procRoot: "/proc",
		openRW: func(path string) error {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return &os.PathError{Op: "open", Path: path, Err: err}
			}
			return unix.Close(fd)
		},
		memlock: func() (uint64, uint64, error) {
			var r unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
				return 0, 0, err
			}
			return r.Cur, r.Max, nil
		},
		devices:   uverbs.Devices,
		netnsMode: netlinkNetnsMode,
		gidTable:  hostGIDTable,
		ifaceAddrs: func(index int) (string, []string, error) {
			return hostIfaceAddrs("/proc", index)
		},
	}
}

// The fixes shared by several checks.
const (
	fixPassDevices = "pass the devices into the container: docker/podman run --device=/dev/infiniband/rdma_cm --device=/dev/infiniband/uverbsN\n" +
		"(or --device=/dev/infiniband for all); in Kubernetes an RDMA device plugin (e.g. k8s-rdma-shared-dev-plugin) does it"
	fixNoKernelDevice = "the kernel has no RDMA device: see the modules and devices checks"
)

// uverbsNodes lists the uverbs character devices the kernel has
// (/sys/class/infiniband_verbs/uverbsN), with the RDMA device each belongs to.
func uverbsNodes(env *doctorEnv) (map[string]string, error) {
	dir := filepath.Join(env.sysRoot, "class", "infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		ib, _ := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev"))
		out[e.Name()] = strings.TrimSpace(string(ib))
	}
	return out, nil
}

// checkDeviceNodes checks that /dev/infiniband has rdma_cm and a uverbsN
// for each of the kernel's devices, and that this process can open them
// read-write, which is all the library needs of them.
func checkDeviceNodes(env *doctorEnv) []finding {
	const check = "device nodes"
	var out []finding
	kernelNodes, kerr := uverbsNodes(env)
	if _, err := os.Stat(env.devRoot); err != nil {
		f := finding{Check: check, Status: statusProblem, Text: fmt.Sprintf("no %s (%v)", env.devRoot, errors.Unwrap(err))}
		switch {
		case len(kernelNodes) > 0:
			f.Text += fmt.Sprintf("; the kernel has %d uverbs device(s), so this process does not see them", len(kernelNodes))
			f.Fix = fixPassDevices + "\non a host without a container: udev creates them (rdma-core's udev rules); check that devtmpfs is mounted on /dev"
		default:
			f.Fix = fixNoKernelDevice
		}
		return []finding{f}
	}
	if kerr != nil && !errors.Is(kerr, os.ErrNotExist) {
		out = append(out, finding{Check: check, Status: statusNotChecked, Text: fmt.Sprintf("cannot list the kernel's uverbs devices: %v", kerr)})
	}
	names := make([]string, 0, len(kernelNodes)+1)
	for n := range kernelNodes {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		out = append(out, finding{Check: check, Status: statusProblem,
			Text: "the kernel has no uverbs device (" + filepath.Join(env.sysRoot, "class", "infiniband_verbs") + " is empty or missing)",
			Fix:  fixNoKernelDevice})
	}
	names = append(names, "rdma_cm")
	for _, n := range names {
		path := filepath.Join(env.devRoot, n)
		what := path
		if ib := kernelNodes[n]; ib != "" {
			what += " (" + ib + ")"
		}
		if _, err := os.Stat(path); err != nil {
			f := finding{Check: check, Status: statusProblem, Text: what + " is missing"}
			if n == "rdma_cm" {
				if _, err := os.Stat(filepath.Join(env.sysRoot, "class", "misc", "rdma_cm")); err != nil {
					f.Text += "; the kernel has no rdma_cm device either"
					f.Fix = "on the host: modprobe rdma_ucm (a container cannot load modules)"
				} else {
					f.Fix = fixPassDevices
				}
			} else {
				f.Fix = fixPassDevices
			}
			out = append(out, f)
			continue
		}
		err := env.openRW(path)
		switch {
		case err == nil:
			out = append(out, finding{Check: check, Status: statusOK, Text: what + " opens read-write"})
		case errors.Is(err, unix.EACCES):
			out = append(out, finding{Check: check, Status: statusProblem,
				Text: what + " exists but this process may not open it read-write (permission denied" + nodeMode(path) + ")",
				Fix: "run as root, or make the node read-writable for this user: a udev rule such as\n" +
					"  KERNEL==\"uverbs*\", MODE=\"0666\" and KERNEL==\"rdma_cm\", MODE=\"0666\" (rdma-core installs such rules),\n" +
					"or add the user to the node's group; in a container, the node's mode comes from the host"})
		case errors.Is(err, unix.EPERM):
			out = append(out, finding{Check: check, Status: statusProblem,
				Text: what + " exists but opening it is not permitted (the container's device cgroup denies it)",
				Fix:  fixPassDevices + "\n(a node created by mknod or a bind mount is not enough: the device cgroup must allow it)"})
		case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
			out = append(out, finding{Check: check, Status: statusProblem,
				Text: what + " exists but no device is behind it (" + err.Error() + ")",
				Fix:  "the node is stale: recreate it from the host's /dev/infiniband, or pass the host's nodes with --device"})
		default:
			out = append(out, finding{Check: check, Status: statusProblem, Text: what + ": " + err.Error(),
				Fix: fixPassDevices})
		}
	}
	return out
}

// nodeMode describes a node's owner and mode for a permission message.
func nodeMode(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("; mode %04o, owner %d:%d, this process runs as %d:%d",
		st.Mode&0o7777, st.Uid, st.Gid, os.Geteuid(), os.Getegid())
}

// capIPCLock is CAP_IPC_LOCK's bit in /proc/PID/status's CapEff.
const capIPCLock = 14

// hasCapIPCLock reports whether the process has CAP_IPC_LOCK, with which
// the kernel lets it pin memory past RLIMIT_MEMLOCK (ib_umem_get).
func hasCapIPCLock(procRoot string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "status"))
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("CapEff %q: %v", v, err)
			}
			return caps&(1<<capIPCLock) != 0, nil
		}
	}
	return false, errors.New("no CapEff line")
}

// pinnedBytes is what registering n bytes pins: whole pages, one more when
// the buffer does not start on a page boundary.
func pinnedBytes(n uint64) uint64 {
	const page = 4096
	return (n+page-1)/page*page + page
}

// checkMemlock compares RLIMIT_MEMLOCK with what registering the -mem size
// needs. Registered memory is pinned, and the kernel counts the pinned
// pages of all of the process's registrations against the limit; without
// room, registration fails with ENOMEM.
func checkMemlock(env *doctorEnv) []finding {
	const check = "memlock"
	cur, max, err := env.memlock()
	if err != nil {
		return []finding{{Check: check, Status: statusNotChecked, Text: "cannot read RLIMIT_MEMLOCK: " + err.Error()}}
	}
	need := pinnedBytes(env.memBytes)
	limits := fmt.Sprintf("RLIMIT_MEMLOCK is %s (hard limit %s)", formatBytes(cur), formatBytes(max))
	if cur == unlimitedRlimit {
		return []finding{{Check: check, Status: statusOK, Text: limits}}
	}
	capLock, capErr := hasCapIPCLock(env.procRoot)
	if capErr == nil && capLock {
		return []finding{{Check: check, Status: statusOK, Text: limits + ", but this process has CAP_IPC_LOCK, which lifts the limit for registrations"}}
	}
	needText := fmt.Sprintf("registering %s pins that much in whole pages (a page more unless page-aligned), counted with every other registration and mlock of the process (-mem sets the size)",
		formatBytes(env.memBytes))
	if cur >= need {
		f := finding{Check: check, Status: statusOK, Text: limits + "; " + needText}
		if capErr != nil {
			f.Text += fmt.Sprintf(" (CAP_IPC_LOCK unknown: %v)", capErr)
		}
		return []finding{f}
	}
	f := finding{Check: check, Status: statusProblem, Text: limits + "; " + needText + ", so registration will fail with ENOMEM (cannot allocate memory)"}
	if max == unlimitedRlimit || max >= need {
		f.Fix = "raise the limit before starting the program: ulimit -l unlimited (the hard limit allows it)"
	} else {
		f.Fix = "the hard limit is too low as well: in a container, docker/podman run --ulimit memlock=-1 (Kubernetes: the container\n" +
			"runtime's default, e.g. LimitMEMLOCK=infinity in containerd's systemd unit); on a host, '* - memlock unlimited'\n" +
			"in /etc/security/limits.conf or LimitMEMLOCK=infinity in the service's unit; then ulimit -l unlimited.\n" +
			"Alternatively grant CAP_IPC_LOCK (--cap-add=IPC_LOCK), which lifts the limit for registrations"
	}
	return []finding{f}
}

// coreModules are the kernel modules the library needs, with the sysfs
// path that exists when each is built into the kernel instead.
var coreModules = []struct{ name, builtin, role string }{
	{"ib_core", "class/infiniband", "the RDMA core"},
	{"ib_uverbs", "class/infiniband_verbs", "the verbs device nodes /dev/infiniband/uverbsN"},
	{"rdma_cm", "", "the connection manager"},
	{"rdma_ucm", "class/misc/rdma_cm", "/dev/infiniband/rdma_cm"},
}

// providerModules are the kernel drivers of RDMA devices: the two the
// library has providers for first, then others a user may have loaded.
var providerModules = []string{"rdma_rxe", "mlx5_ib", "siw", "irdma", "bnxt_re", "efa", "mana_ib", "hns_roce_hw_v2", "qedr", "iw_cxgb4", "erdma"}

func moduleLoaded(env *doctorEnv, name string) bool {
	_, err := os.Stat(filepath.Join(env.sysRoot, "module", name))
	return err == nil
}

// checkModules reports the RDMA modules and the devices they provide.
func checkModules(env *doctorEnv) []finding {
	var out []finding
	for _, m := range coreModules {
		f := finding{Check: "module " + m.name}
		switch {
		case moduleLoaded(env, m.name):
			f.Status, f.Text = statusOK, "loaded ("+m.role+")"
		case m.builtin != "" && exists(filepath.Join(env.sysRoot, m.builtin)):
			f.Status, f.Text = statusOK, "built into the kernel ("+m.role+")"
		default:
			f.Status, f.Text = statusProblem, "not loaded ("+m.role+")"
			f.Fix = "on the host: modprobe " + m.name + " (a container cannot load modules; the host must)"
		}
		out = append(out, f)
	}
	var loaded []string
	for _, p := range providerModules {
		if moduleLoaded(env, p) {
			loaded = append(loaded, p)
		}
	}
	devs, err := listDevices(env)
	if err != nil {
		return append(out, finding{Check: "devices", Status: statusNotChecked, Text: "cannot list the RDMA devices: " + err.Error()})
	}
	if len(devs) == 0 {
		f := finding{Check: "devices", Status: statusProblem, Text: "no RDMA device with a uverbs interface"}
		if len(loaded) > 0 {
			f.Text += " (provider modules loaded: " + strings.Join(loaded, ", ") + ")"
		} else {
			f.Text += " (no provider module loaded)"
		}
		f.Fix = "on the host, load the driver of the NIC (mlx5_ib for ConnectX, irdma, bnxt_re, efa, ...), or for soft-RoCE\n" +
			"on any Ethernet interface: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0;\n" +
			"in a netns of its own with the RDMA subsystem in exclusive mode, see the netns check"
		return append(out, f)
	}
	var list []string
	for _, d := range devs {
		s := d.Name
		var attrs []string
		if d.Driver != "" {
			attrs = append(attrs, d.Driver)
		}
		if d.DevPath != "" {
			attrs = append(attrs, filepath.Base(d.DevPath))
		}
		if len(attrs) > 0 {
			s += " (" + strings.Join(attrs, ", ") + ")"
		}
		list = append(list, s)
	}
	text := strings.Join(list, ", ")
	if len(loaded) > 0 {
		text += "; provider modules loaded: " + strings.Join(loaded, ", ")
	}
	return append(out, finding{Check: "devices", Status: statusOK, Text: text})
}

// listDevices lists the RDMA devices; a kernel without an RDMA subsystem
// has none, which the checks report as such rather than as an error.
func listDevices(env *doctorEnv) ([]uverbs.Device, error) {
	devs, err := env.devices()
	if errors.Is(err, uverbs.ErrNoDevice) {
		return nil, nil
	}
	return devs, err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkNetns reports the RDMA subsystem's netns mode and whether this
// process is in the initial network namespace. In exclusive mode a device
// belongs to one netns (the init netns unless moved), so a process in
// another netns sees none; in shared mode every netns sees every device,
// and rdma_cm resolves addresses among the interfaces of the caller's netns.
func checkNetns(env *doctorEnv) []finding {
	var out []finding
	shared, modeErr := env.netnsMode()
	switch {
	case modeErr != nil:
		out = append(out, finding{Check: "netns mode", Status: statusNotChecked, Text: "cannot ask RDMA netlink: " + modeErr.Error()})
	case shared:
		out = append(out, finding{Check: "netns mode", Status: statusOK, Text: "shared: every network namespace sees every RDMA device"})
	default:
		out = append(out, finding{Check: "netns mode", Status: statusOK, Text: "exclusive: a device is visible only in the network namespace it belongs to (rdma dev set DEV netns NS)"})
	}
	inInit, self, err := inInitNetns(env.procRoot)
	if err != nil {
		out = append(out, finding{Check: "netns", Status: statusNotChecked, Text: err.Error()})
		inInit = true // unknown: raise no problem below
	} else if inInit {
		out = append(out, finding{Check: "netns", Status: statusOK, Text: "this process is in the initial network namespace (" + self + ")"})
	} else {
		out = append(out, finding{Check: "netns", Status: statusInfo, Text: "this process is in a network namespace of its own (" + self + "); rdma_cm uses the IP addresses of this namespace's interfaces"})
	}
	if modeErr == nil && !shared && !inInit {
		if devs, err := listDevices(env); err == nil && len(devs) == 0 {
			out = append(out, finding{Check: "netns", Status: statusProblem,
				Text: "the subsystem is in exclusive mode and no device belongs to this network namespace",
				Fix:  "on the host: rdma dev set DEVICE netns NAME (or rdma system set netns shared, for all namespaces)"})
		}
	}
	return out
}

// inInitNetns compares this process's netns with that of pid 1, which is
// the initial one when this process sees the host's processes. Reading
// another process's ns link needs ptrace rights over it (root, for pid 1),
// so unprivileged this is "not checked".
func inInitNetns(procRoot string) (bool, string, error) {
	self, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "net"))
	if err != nil {
		return false, "", fmt.Errorf("cannot read this process's netns: %v", err)
	}
	comm, err := os.ReadFile(filepath.Join(procRoot, "2", "comm"))
	if err != nil || strings.TrimSpace(string(comm)) != "kthreadd" {
		return false, self, fmt.Errorf("this process (%s) is in a pid namespace of its own, so pid 1 is not the host's init and the initial netns is not visible", self)
	}
	init, err := os.Readlink(filepath.Join(procRoot, "1", "ns", "net"))
	if err != nil {
		return false, self, fmt.Errorf("cannot read pid 1's netns to compare with this process's (%s): %v (only root may)", self, errors.Unwrap(err))
	}
	return init == self, self, nil
}

// hostGIDTable opens dev and reads its GID table and ports' link layers.
func hostGIDTable(dev uverbs.Device) ([]uverbs.GIDEntry, map[uint32]uverbs.LinkLayer, error) {
	ctx, err := uverbs.Open(dev.Name)
	if err != nil {
		return nil, nil, err
	}
	defer ctx.Close()
	attr, err := ctx.QueryDevice()
	if err != nil {
		return nil, nil, err
	}
	ll := map[uint32]uverbs.LinkLayer{}
	for p := 1; p <= int(attr.PhysPortCnt); p++ {
		pa, err := ctx.QueryPort(uint8(p))
		if err != nil {
			return nil, nil, fmt.Errorf("port %d: %w", p, err)
		}
		ll[uint32(p)] = pa.LinkLayer
	}
	gids, err := ctx.QueryGIDTable()
	return gids, ll, err
}

var errNoIface = errors.New("no such interface in this network namespace")

// hostIfaceAddrs returns an interface's addresses, without the IPv6
// addresses the kernel does not use yet or any more (tentative while
// duplicate address detection runs, or failed it): those have no GID.
func hostIfaceAddrs(procRoot string, index int) (string, []string, error) {
	ifi, err := net.InterfaceByIndex(index)
	if err != nil {
		return "", nil, errNoIface
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return ifi.Name, nil, err
	}
	unusable := unusableInet6(procRoot)
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if unusable[ip] {
			continue
		}
		out = append(out, ip.String())
	}
	return ifi.Name, out, nil
}

// The address flags /proc/net/if_inet6 prints (Linux's <linux/if_addr.h>),
// named here so that the doctor compiles on every system.
const (
	ifaFDADFailed = 0x08
	ifaFTentative = 0x40
)

// unusableInet6 reads /proc/net/if_inet6 for addresses that are tentative
// (IFA_F_TENTATIVE) or failed duplicate address detection (IFA_F_DADFAILED).
func unusableInet6(procRoot string) map[netip.Addr]bool {
	b, err := os.ReadFile(filepath.Join(procRoot, "net", "if_inet6"))
	if err != nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || len(f[0]) != 32 {
			continue
		}
		var a [16]byte
		ok := true
		for i := range a {
			v, err := strconv.ParseUint(f[0][2*i:2*i+2], 16, 8)
			if err != nil {
				ok = false
				break
			}
			a[i] = byte(v)
		}
		flags, err := strconv.ParseUint(f[4], 16, 32)
		if !ok || err != nil {
			continue
		}
		if flags&(ifaFTentative|ifaFDADFailed) != 0 {
			out[netip.AddrFrom16(a)] = true
		}
	}
	return out
}

// checkGIDs checks that every IP address of each RoCE port's netdev has a
// RoCE v2 GID: rdma_cm and the GID index a peer is told both depend on it.
func checkGIDs(env *doctorEnv) []finding {
	const check = "GID table"
	devs, err := listDevices(env)
	if err != nil {
		return []finding{{Check: check, Status: statusNotChecked, Text: "cannot list the RDMA devices: " + err.Error()}}
	}
	if len(devs) == 0 {
		return []finding{{Check: check, Status: statusNotChecked, Text: "no RDMA devices"}}
	}
	var out []finding
	for _, d := range devs {
		gids, ll, err := env.gidTable(d)
		if err != nil {
			out = append(out, finding{Check: check, Status: statusNotChecked, Text: fmt.Sprintf("%s: cannot read the GID table: %v", d.Name, err)})
			continue
		}
		ports := make([]uint32, 0, len(ll))
		for p := range ll {
			ports = append(ports, p)
		}
		slices.Sort(ports)
		for _, p := range ports {
			where := fmt.Sprintf("%s port %d", d.Name, p)
			if ll[p] != uverbs.LinkLayerEthernet {
				out = append(out, finding{Check: check, Status: statusOK, Text: where + ": not an Ethernet port, no IP addresses to match"})
				continue
			}
			have := map[netip.Addr]bool{}
			var netdevs []int
			for _, g := range gids {
				if uint32(g.Port) != p {
					continue
				}
				if g.Type == uverbs.GIDTypeRoCEv2 {
					have[g.GID.Addr()] = true
				}
				if g.NetdevIndex != 0 && !slices.Contains(netdevs, int(g.NetdevIndex)) {
					netdevs = append(netdevs, int(g.NetdevIndex))
				}
			}
			if len(netdevs) == 0 {
				out = append(out, finding{Check: check, Status: statusProblem, Text: where + ": no GID entry is bound to a network interface",
					Fix: "the port has no netdev: for soft-RoCE, rdma link add rxe0 type rxe netdev IFACE; for a NIC, check that its Ethernet interface is up"})
				continue
			}
			slices.Sort(netdevs)
			for _, nd := range netdevs {
				name, addrs, err := env.ifaceAddrs(nd)
				if errors.Is(err, errNoIface) {
					out = append(out, finding{Check: check, Status: statusNotChecked,
						Text: fmt.Sprintf("%s: its interface (index %d) is not in this network namespace", where, nd)})
					continue
				}
				if err != nil {
					out = append(out, finding{Check: check, Status: statusNotChecked, Text: fmt.Sprintf("%s: addresses of %s: %v", where, name, err)})
					continue
				}
				var missing []string
				for _, a := range addrs {
					ip, err := netip.ParseAddr(a)
					if err != nil || !have[ip] {
						missing = append(missing, a)
					}
				}
				if len(missing) > 0 {
					out = append(out, finding{Check: check, Status: statusProblem,
						Text: fmt.Sprintf("%s (%s): no RoCE v2 GID for %s", where, name, strings.Join(missing, ", ")),
						Fix: "the kernel adds a GID for each address of the port's interface as it is configured; a missing one means the\n" +
							"address was added in a way the RDMA core missed or the GID table is full. Re-add the address\n" +
							"(ip addr del/add), or for soft-RoCE recreate the link (rdma link delete/add); use an address that has a GID\n" +
							"(rdmago devinfo -v lists them)"})
					continue
				}
				out = append(out, finding{Check: check, Status: statusOK,
					Text: fmt.Sprintf("%s (%s): a RoCE v2 GID for each of its %d addresses", where, name, len(addrs))})
			}
		}
	}
	return out
}
