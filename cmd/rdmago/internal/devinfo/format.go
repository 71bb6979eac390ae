package devinfo

// The formatter of "rdmago devinfo". It is pure: it turns attributes already
// queried into the text rdma-core v44.0's ibv_devinfo prints, byte for byte.
// Every string table below is ibv_devinfo's own, not the names the uverbs
// package gives the same values elsewhere: ibv_devinfo has its own spellings
// (and its own "invalid ..." fallbacks), and its output is what must match.
//
// C's printf promotes and reinterprets integers in ways Go's fmt does not:
// where ibv_devinfo prints an unsigned 32-bit field with %d, the value is
// shown as the signed int of the same bits, so the formatter converts with
// int32(...) there. Fields the uverbs package keeps as Go int hold the
// kernel's 32-bit values; they are printed through int32 too, as C's int.

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// portInfo is what devinfo shows of one port.
type portInfo struct {
	Num  uint32          // port number, from 1
	Attr uverbs.PortAttr // ibv_query_port
	// GIDs are the port's valid GID table entries (only used in verbose
	// mode), in any order; entries of other ports are ignored.
	GIDs []uverbs.GIDEntry
	// GIDsFailed marks a port whose GID table could not be read: as
	// ibv_devinfo does when ibv_query_gid fails, the output stops after the
	// port's attributes, with no GID lines and no closing blank line. Only
	// the last port of devInfo.Ports may have it set.
	GIDsFailed bool
}

// devInfo is what devinfo shows of one device.
type devInfo struct {
	Dev            uverbs.Device     // name and transport
	Attr           uverbs.DeviceAttr // ibv_query_device_ex
	NumCompVectors int               // the context's num_comp_vectors
	BoardID        string            // sysfs board_id as ibv_read_sysfs_file leaves it; "" if absent
	// Ports are the ports to show, in order: all of them, or the one asked
	// for with -i. If querying a port failed, the ports before it.
	Ports []portInfo
}

// writeDevInfo writes ibv_devinfo's block for one device ("hca_id: ..." to
// the blank line after the last port), with -v's extra lines if verbose.
func writeDevInfo(w io.Writer, d *devInfo, verbose bool) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	a := &d.Attr

	p("hca_id:\t%s\n", d.Dev.Name)
	// The enum names below come from the uverbs types' String methods, which
	// use libibverbs' and devinfo's own spellings.
	p("\ttransport:\t\t\t%s (%d)\n", d.Dev.Transport.String(), int32(d.Dev.Transport))
	if fw := cString(a.FWVer, 64); fw != "" {
		p("\tfw_ver:\t\t\t\t%s\n", fw)
	}
	p("\tnode_guid:\t\t\t%s\n", a.NodeGUID.String())
	p("\tsys_image_guid:\t\t\t%s\n", a.SysImageGUID.String())
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", int32(a.VendorPartID))
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	if d.BoardID != "" {
		p("\tboard_id:\t\t\t%s\n", d.BoardID)
	}
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)

	if verbose {
		writeDeviceVerbose(p, a, d.NumCompVectors)
	}

	for i := range d.Ports {
		if !writePort(p, d.Dev.Transport, &d.Ports[i], verbose) {
			break
		}
	}
	return bw.Flush()
}

type printer func(format string, args ...any)

// writeDeviceVerbose writes the device attributes only -v shows.
func writeDeviceVerbose(p printer, a *uverbs.DeviceAttr, numCompVectors int) {
	p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	p("\tmax_qp:\t\t\t\t%d\n", int32(a.MaxQP))
	p("\tmax_qp_wr:\t\t\t%d\n", int32(a.MaxQPWR))
	p("\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
	writeFlags(p, uint64(a.DeviceCapFlags), deviceCapFlagNames, 0xffffffff)
	p("\tmax_sge:\t\t\t%d\n", int32(a.MaxSGE))
	p("\tmax_sge_rd:\t\t\t%d\n", int32(a.MaxSGERd))
	p("\tmax_cq:\t\t\t\t%d\n", int32(a.MaxCQ))
	p("\tmax_cqe:\t\t\t%d\n", int32(a.MaxCQE))
	p("\tmax_mr:\t\t\t\t%d\n", int32(a.MaxMR))
	p("\tmax_pd:\t\t\t\t%d\n", int32(a.MaxPD))
	p("\tmax_qp_rd_atom:\t\t\t%d\n", int32(a.MaxQPRdAtom))
	p("\tmax_ee_rd_atom:\t\t\t%d\n", int32(a.MaxEERdAtom))
	p("\tmax_res_rd_atom:\t\t%d\n", int32(a.MaxResRdAtom))
	p("\tmax_qp_init_rd_atom:\t\t%d\n", int32(a.MaxQPInitRdAtom))
	p("\tmax_ee_init_rd_atom:\t\t%d\n", int32(a.MaxEEInitRdAtom))
	p("\tatomic_cap:\t\t\t%s (%d)\n", a.AtomicCap.String(), int32(a.AtomicCap))
	p("\tmax_ee:\t\t\t\t%d\n", int32(a.MaxEE))
	p("\tmax_rdd:\t\t\t%d\n", int32(a.MaxRDD))
	p("\tmax_mw:\t\t\t\t%d\n", int32(a.MaxMW))
	p("\tmax_raw_ipv6_qp:\t\t%d\n", int32(a.MaxRawIPv6QP))
	p("\tmax_raw_ethy_qp:\t\t%d\n", int32(a.MaxRawEthyQP))
	p("\tmax_mcast_grp:\t\t\t%d\n", int32(a.MaxMcastGrp))
	p("\tmax_mcast_qp_attach:\t\t%d\n", int32(a.MaxMcastQPAttach))
	p("\tmax_total_mcast_qp_attach:\t%d\n", int32(a.MaxTotalMcastQPAttach))
	p("\tmax_ah:\t\t\t\t%d\n", int32(a.MaxAH))
	p("\tmax_fmr:\t\t\t%d\n", int32(a.MaxFMR))
	if int32(a.MaxFMR) != 0 {
		p("\tmax_map_per_fmr:\t\t%d\n", int32(a.MaxMapPerFMR))
	}
	p("\tmax_srq:\t\t\t%d\n", int32(a.MaxSRQ))
	if int32(a.MaxSRQ) != 0 {
		p("\tmax_srq_wr:\t\t\t%d\n", int32(a.MaxSRQWR))
		p("\tmax_srq_sge:\t\t\t%d\n", int32(a.MaxSRQSGE))
	}
	p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)

	// On-demand paging.
	p("\tgeneral_odp_caps:\n")
	writeFlags(p, uint64(a.ODPCaps.GeneralCaps), odpGeneralNames, ^uint64(0))
	p("\trc_odp_caps:\n")
	writeODPTransport(p, uint32(a.ODPCaps.RCODPCaps))
	p("\tuc_odp_caps:\n")
	writeODPTransport(p, uint32(a.ODPCaps.UCODPCaps))
	p("\tud_odp_caps:\n")
	writeODPTransport(p, uint32(a.ODPCaps.UDODPCaps))
	p("\txrc_odp_caps:\n")
	writeODPTransport(p, uint32(a.XRCODPCaps))

	if a.CompletionTimestampMask != 0 {
		p("\tcompletion timestamp_mask:\t\t\t0x%016x\n", a.CompletionTimestampMask)
	} else {
		p("\tcompletion_timestamp_mask not supported\n")
	}
	if a.HCACoreClock != 0 {
		p("\thca_core_clock:\t\t\t%dkHZ\n", a.HCACoreClock)
	} else {
		p("\tcore clock not supported\n")
	}

	if a.RawPacketCaps != 0 {
		// Known bits only: ibv_devinfo reports no unknown raw packet caps.
		p("\traw packet caps:\n")
		for _, f := range rawPacketCapNames {
			if uint64(a.RawPacketCaps)&f.bit != 0 {
				p("\t\t\t\t\t%s\n", f.name)
			}
		}
	}

	// Only the upper 32 bits are decoded here: the lower ones are the
	// device_cap_flags decoded above.
	p("\tdevice_cap_flags_ex:\t\t0x%X\n", a.DeviceCapFlagsEx)
	writeFlags(p, uint64(a.DeviceCapFlagsEx)&0xffffffff00000000, deviceCapFlagExNames, ^uint64(0))

	p("\ttso_caps:\n")
	p("\t\tmax_tso:\t\t\t%d\n", int32(a.TSOCaps.MaxTSO))
	if a.TSOCaps.MaxTSO != 0 {
		p("\t\tsupported_qp:\n")
		writeFlags(p, uint64(a.TSOCaps.SupportedQPTs), qptNames, 0xffffffff)
	}

	p("\trss_caps:\n")
	p("\t\tmax_rwq_indirection_tables:\t\t\t%d\n", a.RSSCaps.MaxRWQIndirectionTables)
	p("\t\tmax_rwq_indirection_table_size:\t\t\t%d\n", a.RSSCaps.MaxRWQIndirectionTableSize)
	p("\t\trx_hash_function:\t\t\t\t0x%x\n", a.RSSCaps.RXHashFunction)
	p("\t\trx_hash_fields_mask:\t\t\t\t0x%X\n", a.RSSCaps.RXHashFieldsMask)
	if a.RSSCaps.SupportedQPTs != 0 {
		p("\t\tsupported_qp:\n")
		writeFlags(p, uint64(a.RSSCaps.SupportedQPTs), qptNames, 0xffffffff)
	}

	p("\tmax_wq_type_rq:\t\t\t%d\n", a.MaxWQTypeRQ)

	pp := &a.PacketPacingCaps
	p("\tpacket_pacing_caps:\n")
	p("\t\tqp_rate_limit_min:\t%dkbps\n", pp.QPRateLimitMin)
	p("\t\tqp_rate_limit_max:\t%dkbps\n", pp.QPRateLimitMax)
	if pp.QPRateLimitMax != 0 {
		p("\t\tsupported_qp:\n")
		writeFlags(p, uint64(pp.SupportedQPTs), qptNames, 0xffffffff)
	}

	tm := &a.TMCaps
	if tm.MaxNumTags != 0 {
		p("\tmax_rndv_hdr_size:\t\t%d\n", tm.MaxRndvHdrSize)
		p("\tmax_num_tags:\t\t\t%d\n", tm.MaxNumTags)
		p("\tmax_ops:\t\t\t%d\n", tm.MaxOps)
		p("\tmax_sge:\t\t\t%d\n", tm.MaxSGE)
		p("\tflags:\n")
		if tm.Flags&tmCapRC != 0 {
			p("\t\t\t\t\tIBV_TM_CAP_RC\n")
		}
	} else {
		p("\ttag matching not supported\n")
	}

	if cq := a.CQModCaps; cq.MaxCQCount != 0 && cq.MaxCQPeriod != 0 {
		p("\n\tcq moderation caps:\n")
		p("\t\tmax_cq_count:\t%d\n", cq.MaxCQCount)
		p("\t\tmax_cq_period:\t%d us\n\n", cq.MaxCQPeriod)
	}

	if a.MaxDMSize != 0 {
		p("\tmaximum available device memory:\t%dBytes\n\n", a.MaxDMSize)
	}

	p("\tnum_comp_vectors:\t\t%d\n", int32(numCompVectors))
}

// writePort writes one port's block. It reports false when the output must
// stop there (the port's GID table could not be read).
func writePort(p printer, transport uverbs.Transport, pi *portInfo, verbose bool) bool {
	pa := &pi.Attr
	p("\t\tport:\t%d\n", pi.Num)
	p("\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(pa.State), pa.State)
	p("\t\t\tmax_mtu:\t\t%s (%d)\n", pa.MaxMTU.String(), pa.MaxMTU)
	p("\t\t\tactive_mtu:\t\t%s (%d)\n", pa.ActiveMTU.String(), pa.ActiveMTU)
	p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
	p("\t\t\tport_lid:\t\t%d\n", pa.LID)
	p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
	p("\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer.String())

	if verbose {
		p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
		p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
		p("\t\t\tport_cap_flags2:\t0x%04x\n", pa.PortCapFlags2)
		p("\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(pa.MaxVLNum), pa.MaxVLNum)
		p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", pa.BadPKeyCntr)
		p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", pa.QKeyViolCntr)
		p("\t\t\tsm_sl:\t\t\t%d\n", pa.SMSL)
		p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
		p("\t\t\tgid_tbl_len:\t\t%d\n", int32(pa.GIDTblLen))
		p("\t\t\tsubnet_timeout:\t\t%d\n", pa.SubnetTimeout)
		p("\t\t\tinit_type_reply:\t%d\n", pa.InitTypeReply)
		p("\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(pa.ActiveWidth), pa.ActiveWidth)
		p("\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(pa.ActiveSpeed), pa.ActiveSpeed)
		if transport == uverbs.TransportIB {
			p("\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(pa.PhysState), pa.PhysState)
		}
		if pi.GIDsFailed {
			return false
		}
		for _, line := range gidLines(pi.GIDs, pi.Num, pa.GIDTblLen, pa.LinkLayer) {
			p("%s\n", line)
		}
	}
	p("\n")
	return true
}

// gidLines returns the GID lines ibv_devinfo -v prints for a port, without
// their newlines. ibv_devinfo walks indexes 0..gid_tbl_len-1; an empty entry
// reads as the zero GID, and it skips every GID whose lower 64 bits (the
// interface ID) are zero, so a GID with only a prefix set is not shown
// either. IB and RoCE v1 GIDs print as eight raw hex groups, RoCE v2 GIDs as
// an IPv6 address (inet_ntop). On Ethernet ports the type follows.
func gidLines(entries []uverbs.GIDEntry, port uint32, tblLen int, ll uverbs.LinkLayer) []string {
	var es []uverbs.GIDEntry
	for _, e := range entries {
		if uint32(e.Port) == port && int64(e.Index) < int64(tblLen) && !nullGID(e.GID) {
			es = append(es, e)
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Index < es[j].Index })

	var lines []string
	for i, e := range es {
		if i > 0 && es[i-1].Index == e.Index {
			continue // one line per index, as the C loop has
		}
		// ibv_query_gid_type folds IB and RoCE v1 into one sysfs type and
		// reports everything else as RoCE v2.
		v2 := e.Type != uverbs.GIDTypeIB && e.Type != uverbs.GIDTypeRoCEv1
		var s string
		if v2 {
			s = clib.Inet6String(e.GID)
		} else {
			s = e.GID.String()
		}
		suffix := ""
		if ll == uverbs.LinkLayerEthernet {
			if v2 {
				suffix = ", RoCE v2"
			} else {
				suffix = ", RoCE v1"
			}
		}
		lines = append(lines, fmt.Sprintf("\t\t\tGID[%3d]:\t\t%s%s", int32(e.Index), s, suffix))
	}
	return lines
}

// nullGID reports whether ibv_devinfo skips the GID: its interface ID (the
// last eight bytes) is zero.
func nullGID(g qp.GID) bool {
	for _, b := range g[8:] {
		if b != 0 {
			return false
		}
	}
	return true
}

// writeDevList writes the output of ibv_devinfo -l.
func writeDevList(w io.Writer, names []string) error {
	bw := bufio.NewWriter(w)
	s := "s"
	if len(names) == 1 {
		s = ""
	}
	fmt.Fprintf(bw, "%d HCA%s found:\n", len(names), s)
	for _, n := range names {
		fmt.Fprintf(bw, "\t%s\n", n)
	}
	fmt.Fprintf(bw, "\n")
	return bw.Flush()
}

// namedBit names one flag bit.
type namedBit struct {
	bit  uint64
	name string
}

// writeFlags writes the flag-name lines ibv_devinfo prints under a flags
// field: one per known bit set, in table order, then the unknown bits (those
// within mask that no entry names) as "Unknown flags: 0x%X".
func writeFlags(p printer, v uint64, names []namedBit, mask uint64) {
	known := uint64(0)
	for _, f := range names {
		known |= f.bit
		if v&f.bit != 0 {
			p("\t\t\t\t\t%s\n", f.name)
		}
	}
	if unk := v & mask &^ known; unk != 0 {
		p("\t\t\t\t\tUnknown flags: 0x%X\n", unk)
	}
}

// writeODPTransport writes the lines of one transport's ODP capabilities.
func writeODPTransport(p printer, v uint32) {
	if v == 0 {
		p("\t\t\t\t\tNO SUPPORT\n")
		return
	}
	writeFlags(p, uint64(v), odpTransportNames, 0xffffffff)
}

var deviceCapFlagNames = []namedBit{
	{uint64(uverbs.DeviceResizeMaxWR), "RESIZE_MAX_WR"},
	{uint64(uverbs.DeviceBadPKeyCntr), "BAD_PKEY_CNTR"},
	{uint64(uverbs.DeviceBadQKeyCntr), "BAD_QKEY_CNTR"},
	{uint64(uverbs.DeviceRawMulti), "RAW_MULTI"},
	{uint64(uverbs.DeviceAutoPathMig), "AUTO_PATH_MIG"},
	{uint64(uverbs.DeviceChangePhyPort), "CHANGE_PHY_PORT"},
	{uint64(uverbs.DeviceUDAVPortEnforce), "UD_AV_PORT_ENFORCE"},
	{uint64(uverbs.DeviceCurrQPStateMod), "CURR_QP_STATE_MOD"},
	{uint64(uverbs.DeviceShutdownPort), "SHUTDOWN_PORT"},
	{uint64(uverbs.DeviceInitType), "INIT_TYPE"},
	{uint64(uverbs.DevicePortActiveEvent), "PORT_ACTIVE_EVENT"},
	{uint64(uverbs.DeviceSysImageGUID), "SYS_IMAGE_GUID"},
	{uint64(uverbs.DeviceRCRNRNAKGen), "RC_RNR_NAK_GEN"},
	{uint64(uverbs.DeviceSRQResize), "SRQ_RESIZE"},
	{uint64(uverbs.DeviceNNotifyCQ), "N_NOTIFY_CQ"},
	{uint64(uverbs.DeviceMemWindow), "MEM_WINDOW"},
	{uint64(uverbs.DeviceUDIPCsum), "UD_IP_CSUM"},
	{uint64(uverbs.DeviceXRC), "XRC"},
	{uint64(uverbs.DeviceMemMgtExtensions), "MEM_MGT_EXTENSIONS"},
	{uint64(uverbs.DeviceMemWindowType2A), "MEM_WINDOW_TYPE_2A"},
	{uint64(uverbs.DeviceMemWindowType2B), "MEM_WINDOW_TYPE_2B"},
	{uint64(uverbs.DeviceRCIPCsum), "RC_IP_CSUM"},
	{uint64(uverbs.DeviceRawIPCsum), "RAW_IP_CSUM"},
	{uint64(uverbs.DeviceManagedFlowSteering), "MANAGED_FLOW_STEERING"},
}

var deviceCapFlagExNames = []namedBit{
	{uint64(uverbs.DeviceRawScatterFCS), "RAW_SCATTER_FCS"},
	{uint64(uverbs.DevicePCIWriteEndPadding), "PCI_WRITE_END_PADDING"},
}

// ODP capability bits (enum ibv_odp_general_caps, enum ibv_odp_transport_cap_bits).
var odpGeneralNames = []namedBit{
	{1 << 0, "ODP_SUPPORT"},
	{1 << 1, "ODP_SUPPORT_IMPLICIT"},
}

var odpTransportNames = []namedBit{
	{1 << 0, "SUPPORT_SEND"},
	{1 << 1, "SUPPORT_RECV"},
	{1 << 2, "SUPPORT_WRITE"},
	{1 << 3, "SUPPORT_READ"},
	{1 << 4, "SUPPORT_ATOMIC"},
	{1 << 5, "SUPPORT_SRQ"},
}

// QP types of supported_qpts masks: bit (1 << enum ibv_qp_type).
var qptNames = []namedBit{
	{1 << 8, "SUPPORT_RAW_PACKET"}, // IBV_QPT_RAW_PACKET
	{1 << 4, "SUPPORT_UD"},         // IBV_QPT_UD
}

// enum ibv_raw_packet_caps.
var rawPacketCapNames = []namedBit{
	{1 << 0, "C-VLAN stripping offload"},
	{1 << 1, "Scatter FCS offload"},
	{1 << 2, "IP csum offload"},
	{1 << 3, "Delay drop"},
}

const tmCapRC = 1 << 0 // IBV_TM_CAP_RC

func portStateStr(s uverbs.PortState) string {
	switch s {
	case uverbs.PortDown:
		return "PORT_DOWN"
	case uverbs.PortInit:
		return "PORT_INIT"
	case uverbs.PortArmed:
		return "PORT_ARMED"
	case uverbs.PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

func physStateStr(s uint8) string {
	switch s {
	case 1:
		return "SLEEP"
	case 2:
		return "POLLING"
	case 3:
		return "DISABLED"
	case 4:
		return "PORT_CONFIGURATION TRAINNING" // sic
	case 5:
		return "LINK_UP"
	case 6:
		return "LINK_ERROR_RECOVERY"
	case 7:
		return "PHY TEST"
	}
	return "invalid physical state"
}

// widthStr names an IB link width code (the "X" follows in the output).
func widthStr(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

// speedStr names an IB link speed code (ibv_port_attr.active_speed).
func speedStr(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

// vlStr names a max_vl_num code.
func vlStr(v uint8) string {
	switch v {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	}
	return "invalid value"
}

// cString returns s as C would see it in a char[size] buffer printed with
// %s: up to the first NUL, and at most size-1 bytes.
func cString(s string, size int) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if len(s) > size-1 {
		s = s[:size-1]
	}
	return s
}
