package rdmatool

import (
	"fmt"
	"io"

	"github.com/mdlayher/netlink"

	"github.com/rdmago/rdma/internal/abi"
)

// rdma dev, rdma link, rdma system.

func (r *rd) cmdDev() error {
	show := func() error { return r.execDev(r.devOneShow) }
	return r.exec([]sub{
		{"", show}, {"show", show}, {"list", show}, {"set", r.unsupported("rdma dev set")},
		{"help", r.devHelp},
	}, "dev command")
}

func (r *rd) devHelp() error {
	io.WriteString(r.stdout, `Usage: rdma dev show [DEV]
       rdma dev set [DEV] name DEVNAME
       rdma dev set [DEV] netns NSNAME
       rdma dev set [DEV] adaptive-moderation [on|off]
`)
	return nil
}

// devOneShow runs for one device: its line, unless an argument follows.
func (r *rd) devOneShow() error {
	return r.exec([]sub{{"", r.devNoArgs}}, "parameter")
}

func (r *rd) devNoArgs() error {
	as, err := r.request(abi.RDMA_NLDEV_CMD_GET, 0, r.devEncoder(false))
	if err != nil {
		return err
	}
	for _, a := range as {
		r.printDev(a)
	}
	return nil
}

var nodeTypes = []string{"unknown", "ca", "switch", "router", "rnic", "usnic", "usnic_udp", "unspecified"}

// devCaps names the bits of the device capability flags, as the C tool
// does; bits it does not know print as "UNKNOWN".
var devCaps = map[int]string{
	0: "RESIZE_MAX_WR", 1: "BAD_PKEY_CNTR", 2: "BAD_QKEY_CNTR", 3: "RAW_MULTI",
	4: "AUTO_PATH_MIG", 5: "CHANGE_PHY_PORT", 6: "UD_AV_PORT_ENFORCE_PORT_ENFORCE",
	7: "CURR_QP_STATE_MOD", 8: "SHUTDOWN_PORT", 9: "INIT_TYPE", 10: "PORT_ACTIVE_EVENT",
	11: "SYS_IMAGE_GUID", 12: "RC_RNR_NAK_GEN", 13: "SRQ_RESIZE", 14: "N_NOTIFY_CQ",
	15: "LOCAL_DMA_LKEY", 17: "MEM_WINDOW", 18: "UD_IP_CSUM", 19: "UD_TSO", 20: "XRC",
	21: "MEM_MGT_EXTENSIONS", 22: "BLOCK_MULTICAST_LOOPBACK", 23: "MEM_WINDOW_TYPE_2A",
	24: "MEM_WINDOW_TYPE_2B", 25: "RC_IP_CSUM", 26: "RAW_IP_CSUM", 27: "CROSS_CHANNEL",
	29: "MANAGED_FLOW_STEERING", 30: "SIGNATURE_HANDOVER", 31: "ON_DEMAND_PAGING",
	32: "SG_GAPS_REG", 33: "VIRTUAL_FUNCTION", 34: "RAW_SCATTER_FCS",
	35: "RDMA_NETDEV_OPA_VNIC", 36: "PCI_WRITE_END_PADDING",
}

// guid formats a GUID as the C tool does: four groups of four hex digits.
func guid(v uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v>>48, v>>32&0xffff, v>>16&0xffff, v&0xffff)
}

func (r *rd) printDev(a attrs) {
	if !a.has(abi.RDMA_NLDEV_ATTR_DEV_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) {
		return
	}
	p := r.p
	p.openObject()
	idx := a.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX)
	p.uint(jsonO, "ifindex", "", idx)
	p.uint(fp, "", "%d: ", idx)
	p.str(anyO, "ifname", "%s: ", a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME))
	if a.has(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE) {
		p.str(anyO, "node_type", "node_type %s ", tableName(nodeTypes, a.uint(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE), "unknown"))
	}
	if a.has(abi.RDMA_NLDEV_ATTR_FW_VERSION) {
		p.str(anyO, "fw", "fw %s ", a.str(abi.RDMA_NLDEV_ATTR_FW_VERSION))
	}
	if a.has(abi.RDMA_NLDEV_ATTR_NODE_GUID) {
		p.str(anyO, "node_guid", "node_guid %s ", guid(a.uint(abi.RDMA_NLDEV_ATTR_NODE_GUID)))
	}
	if a.has(abi.RDMA_NLDEV_ATTR_SYS_IMAGE_GUID) {
		p.str(anyO, "sys_image_guid", "sys_image_guid %s ", guid(a.uint(abi.RDMA_NLDEV_ATTR_SYS_IMAGE_GUID)))
	}
	if r.details > 0 {
		if a.has(abi.RDMA_NLDEV_ATTR_DEV_DIM) {
			p.onOff("adaptive-moderation", "adaptive-moderation %s ", a.uint(abi.RDMA_NLDEV_ATTR_DEV_DIM) != 0)
		}
		if a.has(abi.RDMA_NLDEV_ATTR_CAP_FLAGS) {
			r.printCaps(a.uint(abi.RDMA_NLDEV_ATTR_CAP_FLAGS), devCaps)
		}
	}
	p.newline()
}

// printCaps prints a capability mask: a list on its own line in plain
// output, an array in JSON.
func (r *rd) printCaps(caps uint64, names map[int]string) {
	p := r.p
	p.plain("\n    caps: <")
	if p.json {
		p.name("caps")
		p.startArray()
	}
	for i := 0; caps != 0; i++ {
		if caps&1 != 0 {
			n, ok := names[i]
			if !ok {
				n = "UNKNOWN"
			}
			f := "%s"
			if caps>>1 != 0 {
				f = "%s, "
			}
			p.str(anyO, "", f, n)
		}
		caps >>= 1
	}
	if p.json {
		p.endArray()
	} else {
		p.plain(">")
	}
}

func (r *rd) cmdLink() error {
	show := func() error { return r.execLink(r.linkOneShow, true) }
	return r.exec([]sub{
		{"", show}, {"add", r.linkAdd}, {"delete", r.linkDel}, {"show", show}, {"list", show},
		{"help", r.linkHelp},
	}, "link command")
}

func (r *rd) linkHelp() error {
	io.WriteString(r.stdout, `Usage: rdma link show [DEV/PORT_INDEX]
Usage: rdma link add NAME type TYPE netdev NETDEV
Usage: rdma link delete NAME
`)
	return nil
}

func (r *rd) linkOneShow() error {
	if r.port == 0 {
		return nil
	}
	return r.exec([]sub{{"", r.linkNoArgs}}, "parameter")
}

var (
	portStates = []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	physStates = []string{"UNKNOWN", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP",
		"LINK_ERROR_RECOVER", "PHY_TEST", "UNKNOWN", "OPA_OFFLINE", "UNKNOWN", "OPA_TEST"}
)

func (r *rd) linkNoArgs() error {
	as, err := r.request(abi.RDMA_NLDEV_CMD_PORT_GET, 0, r.devEncoder(true))
	if err != nil {
		return err
	}
	p := r.p
	for _, a := range as {
		if !a.has(abi.RDMA_NLDEV_ATTR_DEV_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) || !a.has(abi.RDMA_NLDEV_ATTR_PORT_INDEX) {
			continue
		}
		p.openObject()
		p.uint(jsonO, "ifindex", "", a.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX))
		p.str(anyO, "ifname", "link %s/", a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME))
		p.uint(anyO, "port", "%d ", a.uint(abi.RDMA_NLDEV_ATTR_PORT_INDEX))
		if a.has(abi.RDMA_NLDEV_ATTR_SUBNET_PREFIX) {
			p.str(anyO, "subnet_prefix", "subnet_prefix %s ", guid(a.uint(abi.RDMA_NLDEV_ATTR_SUBNET_PREFIX)))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_LID) {
			p.uint(anyO, "lid", "lid %d ", a.uint(abi.RDMA_NLDEV_ATTR_LID))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_SM_LID) {
			p.uint(anyO, "sm_lid", "sm_lid %d ", a.uint(abi.RDMA_NLDEV_ATTR_SM_LID))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_LMC) {
			p.uint(anyO, "lmc", "lmc %d ", a.uint(abi.RDMA_NLDEV_ATTR_LMC))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_PORT_STATE) {
			p.str(anyO, "state", "state %s ", tableName(portStates, a.uint(abi.RDMA_NLDEV_ATTR_PORT_STATE), "UNKNOWN"))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_PORT_PHYS_STATE) {
			p.str(anyO, "physical_state", "physical_state %s ", tableName(physStates, a.uint(abi.RDMA_NLDEV_ATTR_PORT_PHYS_STATE), "UNKNOWN"))
		}
		if a.has(abi.RDMA_NLDEV_ATTR_NDEV_NAME) && a.has(abi.RDMA_NLDEV_ATTR_NDEV_INDEX) {
			p.str(anyO, "netdev", "netdev %s ", a.str(abi.RDMA_NLDEV_ATTR_NDEV_NAME))
			idx := a.uint(abi.RDMA_NLDEV_ATTR_NDEV_INDEX)
			p.uint(jsonO, "netdev_index", "", idx)
			if r.details > 0 {
				p.uint(fp, "", "netdev_index %d ", idx)
			}
		}
		p.newline()
	}
	return nil
}

// linkAdd is "link add NAME type TYPE netdev NETDEV".
func (r *rd) linkAdd() error {
	if r.noArg() {
		r.errf("Please provide a link name to add.\n")
		return errFailed
	}
	name := r.argv()
	r.argInc()
	var typ string
	netdev := func() error {
		if r.noArg() {
			r.errf("Please provide a net device name.\n")
			return errFailed
		}
		nd := r.argv()
		e := newEncoder()
		e.str(abi.RDMA_NLDEV_ATTR_DEV_NAME, name)
		e.str(abi.RDMA_NLDEV_ATTR_LINK_TYPE, typ)
		e.str(abi.RDMA_NLDEV_ATTR_NDEV_NAME, nd)
		_, err := r.request(abi.RDMA_NLDEV_CMD_NEWLINK, netlink.Acknowledge, e)
		return err
	}
	typeArg := func() error {
		if r.noArg() {
			r.errf("Please provide a link type name.\n")
			return errFailed
		}
		typ = r.argv()
		r.argInc()
		return r.exec([]sub{{"", r.linkHelp}, {"netdev", netdev}}, "parameter")
	}
	return r.exec([]sub{{"", r.linkHelp}, {"type", typeArg}}, "parameter")
}

// linkDel is "link delete NAME".
func (r *rd) linkDel() error {
	if r.noArg() {
		r.errf("Please provide device name.\n")
		return errFailed
	}
	return r.execDev(func() error {
		_, err := r.request(abi.RDMA_NLDEV_CMD_DELLINK, netlink.Acknowledge, r.devEncoder(false))
		return err
	})
}

func (r *rd) cmdSys() error {
	return r.exec([]sub{
		{"", r.sysShow}, {"show", r.sysShow}, {"set", r.sysSet}, {"help", r.sysHelp},
	}, "system command")
}

func (r *rd) sysHelp() error {
	io.WriteString(r.stdout, `Usage: rdma system show [ netns ]
       rdma system set netns { shared | exclusive }
`)
	return nil
}

var netnsModes = []string{"exclusive", "shared"}

func (r *rd) sysShow() error {
	show := func() error {
		as, err := r.request(abi.RDMA_NLDEV_CMD_SYS_GET, 0, encoder{})
		if err != nil {
			return err
		}
		// The C tool prints this plain even with -j: it opens no JSON
		// array for it.
		for _, a := range as {
			if a.has(abi.RDMA_NLDEV_SYS_ATTR_NETNS_MODE) {
				r.outf("netns %s ", tableName(netnsModes, a.uint(abi.RDMA_NLDEV_SYS_ATTR_NETNS_MODE), "unknown"))
			}
			if a.has(abi.RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK) {
				s := "off"
				if a.uint(abi.RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK) != 0 {
					s = "on"
				}
				r.outf("copy-on-fork %s\n", s)
			}
		}
		return nil
	}
	return r.exec([]sub{{"", show}, {"netns", show}}, "parameter")
}

func (r *rd) sysSet() error {
	help := func() error {
		io.WriteString(r.stdout, "Usage: rdma system set [PARAM] value\n            system set netns { shared | exclusive }\n")
		return nil
	}
	netns := func() error {
		var mode uint8
		switch {
		case !r.noArg() && r.argv() == "shared":
			mode = 1
		case !r.noArg() && r.argv() == "exclusive":
			mode = 0
		default:
			r.errf("valid options are: { shared | exclusive }\n")
			return errFailed
		}
		e := newEncoder()
		e.u8(abi.RDMA_NLDEV_SYS_ATTR_NETNS_MODE, mode)
		_, err := r.request(abi.RDMA_NLDEV_CMD_SYS_SET, netlink.Acknowledge, e)
		return err
	}
	return r.exec([]sub{{"", help}, {"netns", netns}}, "parameter")
}
