//go:build linux && amd64

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// sysfsProfile is the part of the device profile that sysfs shows. Both
// drivers list devices from sysfs (RDMA netlink is refused), so these
// files are all either of them learns before it opens the device.
type sysfsProfile struct {
	IBDev        string   `json:"ibdev"`
	VendorID     uint32   `json:"vendor_id"`      // PCI vendor (Mellanox: 0x15b3)
	PCIDevice    uint32   `json:"pci_device_id"`  // PCI device (ConnectX-6: 0x101b)
	NodeGUID     string   `json:"node_guid"`      // "0011:2233:4455:6677"
	SysImageGUID string   `json:"sys_image_guid"` // as node_guid
	FWVer        string   `json:"fw_ver_string"`
	HCAType      string   `json:"hca_type"`
	BoardID      string   `json:"board_id"`
	GIDs         []string `json:"gids"`      // port 1's table, by index
	GIDTypes     []string `json:"gid_types"` // "IB/RoCE v1" or "RoCE v2", by index
	NetDev       string   `json:"netdev"`
}

func loadSysfsProfile(path string) (*sysfsProfile, error) {
	p := &sysfsProfile{IBDev: "mlx5_0", VendorID: 0x15b3, PCIDevice: 0x101b, NetDev: "eth0", HCAType: "MT4123", BoardID: "MT_0000000222"}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// writeSysfs lays out the class directories the shim binds over
// /sys/class: the uverbs character device and the device, its PCI
// identity (modalias, for libibverbs' driver match; the driver link, for
// ours) and port 1's GID table.
func writeSysfs(dir string, p *sysfsProfile) error {
	const pciDir = "mlx5cmp_pci/0000:00:05.0"
	files := map[string]string{
		"infiniband_verbs/abi_version":         "6",
		"infiniband_verbs/uverbs0/ibdev":       p.IBDev,
		"infiniband_verbs/uverbs0/dev":         fmt.Sprintf("%d:%d", devMajor, devMinor),
		"infiniband_verbs/uverbs0/abi_version": "1",
	}
	d := "infiniband/" + p.IBDev + "/"
	files[d+"node_type"] = "1: CA"
	files[d+"node_guid"] = p.NodeGUID
	files[d+"sys_image_guid"] = p.SysImageGUID
	files[d+"fw_ver"] = p.FWVer
	files[d+"hca_type"] = p.HCAType
	files[d+"board_id"] = p.BoardID
	files[d+"node_desc"] = "mlx5cmp " + p.IBDev
	files[pciDir+"/vendor"] = fmt.Sprintf("0x%04x", p.VendorID)
	files[pciDir+"/device"] = fmt.Sprintf("0x%04x", p.PCIDevice)
	files[pciDir+"/modalias"] = fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc02sc00i00", p.VendorID, p.PCIDevice, p.VendorID, 0x0007)
	files[d+"ports/1/state"] = "4: ACTIVE"
	files[d+"ports/1/phys_state"] = "5: LinkUp"
	files[d+"ports/1/link_layer"] = "Ethernet"
	files[d+"ports/1/lid"] = "0x0"
	files[d+"ports/1/sm_lid"] = "0x0"
	files[d+"ports/1/lid_mask_count"] = "0"
	files[d+"ports/1/sm_sl"] = "0"
	files[d+"ports/1/rate"] = "100 Gb/sec (2X HDR)"
	for i, g := range p.GIDs {
		a, err := netip.ParseAddr(g)
		if err != nil {
			return fmt.Errorf("gid %d: %w", i, err)
		}
		b := a.As16()
		var parts []string
		for j := 0; j < 16; j += 2 {
			parts = append(parts, fmt.Sprintf("%02x%02x", b[j], b[j+1]))
		}
		files[fmt.Sprintf("%sports/1/gids/%d", d, i)] = strings.Join(parts, ":")
		t := "IB/RoCE v1"
		if i < len(p.GIDTypes) {
			t = p.GIDTypes[i]
		}
		files[fmt.Sprintf("%sports/1/gid_attrs/types/%d", d, i)] = t
		files[fmt.Sprintf("%sports/1/gid_attrs/ndevs/%d", d, i)] = p.NetDev
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content+"\n"), 0o444); err != nil {
			return err
		}
	}
	// The driver bound to the PCI function: our driver match reads this
	// link's name. Only the name matters; the link dangles.
	if err := os.Symlink("../../bus/pci/drivers/mlx5_core", filepath.Join(dir, pciDir, "driver")); err != nil {
		return err
	}
	// Both class entries link to the PCI function as in a real sysfs; it
	// lives inside the tree because only /sys/class is replaced.
	for _, l := range []string{d + "device", "infiniband_verbs/uverbs0/device"} {
		if err := os.Symlink("../../"+pciDir, filepath.Join(dir, l)); err != nil {
			return err
		}
	}
	return nil
}
