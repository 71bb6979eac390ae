//go:build linux

package fake

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/rdmago/rdma/internal/abi"
)

// Profile is the device both drivers see: one JSON file read by the
// supervisor (sysfs) and by the fake kernel (command answers). The
// sections named after uapi structs ("device", "device_ex", "port",
// "mlx5_context") unmarshal into those structs, so their keys are the
// header's field names (encoding/json matches them case-insensitively).
// See the package documentation for where each value comes from.
type Profile struct {
	IBDev        string   `json:"ibdev"`
	NodeGUID     string   `json:"node_guid"`      // "0011:2233:4455:6677", as sysfs writes it
	SysImageGUID string   `json:"sys_image_guid"` // same format
	FWVer        string   `json:"fw_ver_string"`  // "20.31.1014": major.minor.subminor
	GIDs         []string `json:"gids"`           // port 1's table, by index
	GIDTypes     []string `json:"gid_types"`      // "IB/RoCE v1" or "RoCE v2"
	NetdevIndex  uint32   `json:"netdev_ifindex"` // the GID entries' netdev_ifindex

	// Device is struct ib_uverbs_query_device_resp; fw_ver, node_guid
	// and sys_image_guid are filled from the strings above.
	Device abi.IbUverbsQueryDeviceResp `json:"device"`
	// DeviceEx is the extended part of struct
	// ib_uverbs_ex_query_device_resp (its base is ignored).
	DeviceEx abi.IbUverbsExQueryDeviceResp `json:"device_ex"`
	// Port is port 1's struct ib_uverbs_query_port_resp.
	Port          abi.IbUverbsQueryPortResp `json:"port"`
	PortCapFlags2 uint16                    `json:"port_cap_flags2"`
	ActiveSpeedEx uint32                    `json:"active_speed_ex"`
	// NumCompVectors is GET_CONTEXT's num_comp_vectors.
	NumCompVectors uint32 `json:"num_comp_vectors"`
	// CoreSupport is GET_CONTEXT's core_support
	// (IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS: 1).
	CoreSupport uint64 `json:"core_support"`

	// Mlx5Context is the device's half of struct
	// mlx5_ib_alloc_ucontext_resp; the kernel derives the rest (tot_bfregs,
	// cqe_version, response_length) from the request and the switches.
	Mlx5Context abi.Mlx5IbAllocUcontextResp `json:"mlx5_context"`
	// Mlx5QueryDevice is the driver data of EX_QUERY_DEVICE (struct
	// mlx5_ib_query_device_resp); response_length is the kernel's.
	Mlx5QueryDevice abi.Mlx5IbQueryDeviceResp `json:"mlx5_query_device"`

	// Switches: what the device and kernel grant.
	DynUAR     bool  `json:"dyn_uar"`     // MLX5_LIB_CAP_DYN_UAR honoured: tot_bfregs 0, UAR objects
	DEVX       bool  `json:"devx"`        // DEVX general commands answered; false: EOPNOTSUPP
	DEVXUctx   bool  `json:"devx_uctx"`   // a DEVX user context (MLX5_IB_ALLOC_UCTX_DEVX) is granted
	CQEVersion uint8 `json:"cqe_version"` // the device's cqe_version capability
	ECE        bool  `json:"ece"`         // ece_support: echo the requested ECE options
	LogMaxCQSz uint8 `json:"log_max_cq_sz"`
	LogMaxQPSz uint8 `json:"log_max_qp_sz"`
	// NoVerbsIoctl: a kernel from before the uverbs ioctl interface:
	// RDMA_VERBS_IOCTL fails with ENOTTY and only write() commands work.
	NoVerbsIoctl bool `json:"no_verbs_ioctl"`

	// Numbering, so that runs compare: the first QPN, CQN, mkey index and
	// hardware UAR index handed out.
	QPNBase  uint32 `json:"qpn_base"`
	CQNBase  uint32 `json:"cqn_base"`
	MkeyBase uint32 `json:"mkey_base"`
	UARBase  uint32 `json:"uar_index_base"`
	PDNBase  uint32 `json:"pdn_base"`
	// CoreClock is the free-running counter value the core clock page
	// shows (internal_timer_h:l).
	CoreClock uint64 `json:"core_clock"`
}

// LoadProfile reads a device profile.
func LoadProfile(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := new(Profile)
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := p.fill(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// fill derives the binary fields from the strings and checks the
// profile's consistency.
func (p *Profile) fill() error {
	var err error
	if p.Device.Node_guid, err = parseGUID(p.NodeGUID); err != nil {
		return fmt.Errorf("node_guid: %w", err)
	}
	if p.SysImageGUID == "" {
		p.SysImageGUID = p.NodeGUID
	}
	if p.Device.Sys_image_guid, err = parseGUID(p.SysImageGUID); err != nil {
		return fmt.Errorf("sys_image_guid: %w", err)
	}
	parts := strings.Split(p.FWVer, ".")
	if len(parts) != 3 {
		return fmt.Errorf("fw_ver_string %q: want major.minor.subminor", p.FWVer)
	}
	var v [3]uint64
	for i, s := range parts {
		if v[i], err = strconv.ParseUint(s, 10, 16); err != nil {
			return fmt.Errorf("fw_ver_string %q: %w", p.FWVer, err)
		}
	}
	// mlx5_ib_query_device: fw_rev_maj << 32 | fw_rev_min << 16 | fw_rev_sub.
	p.Device.Fw_ver = v[0]<<32 | v[1]<<16 | v[2]
	for i, g := range p.GIDs {
		if _, err := netip.ParseAddr(g); err != nil {
			return fmt.Errorf("gid %d: %w", i, err)
		}
	}
	if p.CQEVersion > 1 {
		return fmt.Errorf("cqe_version %d: the fake knows 0 and 1", p.CQEVersion)
	}
	if p.LogMaxCQSz == 0 || p.LogMaxQPSz == 0 {
		return fmt.Errorf("log_max_cq_sz and log_max_qp_sz are required")
	}
	return nil
}

// parseGUID reads sysfs's "0011:2233:4455:6677" into the kernel's __be64
// as a native load of its bytes.
func parseGUID(s string) (uint64, error) {
	h := strings.ReplaceAll(s, ":", "")
	u, err := strconv.ParseUint(h, 16, 64)
	if err != nil || len(h) != 16 {
		return 0, fmt.Errorf("GUID %q: want xxxx:xxxx:xxxx:xxxx", s)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], u)
	return binary.NativeEndian.Uint64(b[:]), nil
}

// gidEntry returns GID table entry i of port 1, or false.
func (p *Profile) gidEntry(i int) (abi.IbUverbsGidEntry, bool) {
	if i < 0 || i >= len(p.GIDs) {
		return abi.IbUverbsGidEntry{}, false
	}
	a := netip.MustParseAddr(p.GIDs[i]).As16()
	e := abi.IbUverbsGidEntry{Gid_index: uint32(i), Port_num: 1, Netdev_ifindex: p.NetdevIndex}
	e.Gid[0] = binary.NativeEndian.Uint64(a[0:])
	e.Gid[1] = binary.NativeEndian.Uint64(a[8:])
	// enum ib_uverbs_gid_type: IB 0, RoCE v1 1, RoCE v2 2.
	e.Gid_type = 1
	if i < len(p.GIDTypes) && p.GIDTypes[i] == "RoCE v2" {
		e.Gid_type = 2
	}
	return e, true
}
