package cm

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
)

func TestGetAddrInfo(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		name          string
		node, service string
		hints         *AddrInfo
		want          AddrInfo
	}{
		{"active IPv4", "10.0.2.15", "7471", nil,
			AddrInfo{Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("10.0.2.15:7471")}},
		{"active IPv6", "fe80::1", "7471", &AddrInfo{PortSpace: PSTCP},
			AddrInfo{Family: unix.AF_INET6, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("[fe80::1]:7471")}},
		{"IPv6 with a zone", "fe80::1%1", "1", nil,
			AddrInfo{Family: unix.AF_INET6, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("[fe80::1%1]:1")}},
		{"passive", "10.0.2.15", "7471", &AddrInfo{Flags: AIPassive},
			AddrInfo{Flags: AIPassive, Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, SrcAddr: ap("10.0.2.15:7471")}},
		{"passive, no node", "", "7471", &AddrInfo{Flags: AIPassive},
			AddrInfo{Flags: AIPassive, Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, SrcAddr: ap("0.0.0.0:7471")}},
		{"passive IPv6, no node", "", "7471", &AddrInfo{Flags: AIPassive, Family: unix.AF_INET6},
			AddrInfo{Flags: AIPassive, Family: unix.AF_INET6, QPType: qp.RC, PortSpace: PSTCP, SrcAddr: ap("[::]:7471")}},
		{"active, no node", "", "7471", nil,
			AddrInfo{Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("127.0.0.1:7471")}},
		{"UD from the QP type", "10.0.2.15", "7174", &AddrInfo{QPType: qp.UD},
			AddrInfo{Family: unix.AF_INET, QPType: qp.UD, PortSpace: PSUDP, DstAddr: ap("10.0.2.15:7174")}},
		{"UD from the port space", "10.0.2.15", "", &AddrInfo{PortSpace: PSUDP},
			AddrInfo{Family: unix.AF_INET, QPType: qp.UD, PortSpace: PSUDP, DstAddr: ap("10.0.2.15:0")}},
		{"XRC send in the IB port space", "10.0.2.15", "7471", &AddrInfo{PortSpace: PSIB, QPType: qp.XRCSend},
			AddrInfo{Family: unix.AF_INET, QPType: qp.XRCSend, PortSpace: PSIB, DstAddr: ap("10.0.2.15:7471")}},
		{"XRC receive, passive", "", "7471", &AddrInfo{Flags: AIPassive, PortSpace: PSIB, QPType: qp.XRCRecv},
			AddrInfo{Flags: AIPassive, Family: unix.AF_INET, QPType: qp.XRCRecv, PortSpace: PSIB, SrcAddr: ap("0.0.0.0:7471")}},
		{"XRC with the TCP port space", "10.0.2.15", "7471", &AddrInfo{PortSpace: PSTCP, QPType: qp.XRCSend},
			AddrInfo{Family: unix.AF_INET, QPType: qp.XRCSend, PortSpace: PSTCP, DstAddr: ap("10.0.2.15:7471")}},
		{"a service name", "10.0.2.15", "http", nil,
			AddrInfo{Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("10.0.2.15:80")}},
		{"a source address from the hints", "10.0.2.15", "1", &AddrInfo{SrcAddr: ap("10.0.2.16:0")},
			AddrInfo{Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, SrcAddr: ap("10.0.2.16:0"), DstAddr: ap("10.0.2.15:1")}},
		{"hints only", "", "", &AddrInfo{Flags: AINumericHost, Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("1.2.3.4:5")},
			AddrInfo{Flags: AINumericHost, Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("1.2.3.4:5")}},
		{"a mapped address", "::ffff:10.0.2.15", "9", nil,
			AddrInfo{Family: unix.AF_INET, QPType: qp.RC, PortSpace: PSTCP, DstAddr: ap("10.0.2.15:9")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GetAddrInfo(tc.node, tc.service, tc.hints)
			if err != nil {
				t.Fatal(err)
			}
			if got.Flags != tc.want.Flags || got.Family != tc.want.Family || got.QPType != tc.want.QPType ||
				got.PortSpace != tc.want.PortSpace || got.SrcAddr != tc.want.SrcAddr || got.DstAddr != tc.want.DstAddr {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestGetAddrInfoErrors(t *testing.T) {
	for _, tc := range []struct {
		name          string
		node, service string
		hints         *AddrInfo
		errno         unix.Errno
	}{
		{"nothing", "", "", nil, unix.EINVAL},
		{"UD over TCP", "10.0.2.15", "1", &AddrInfo{QPType: qp.UD, PortSpace: PSTCP}, unix.EPROTOTYPE},
		{"RC over UDP", "10.0.2.15", "1", &AddrInfo{QPType: qp.RC, PortSpace: PSUDP}, unix.EPROTOTYPE},
		{"a bad port space", "10.0.2.15", "1", &AddrInfo{PortSpace: 99}, unix.EPROTONOSUPPORT},
		{"a name with AINumericHost", "localhost", "1", &AddrInfo{Flags: AINumericHost}, unix.EINVAL},
		{"IPv4 for an IPv6 family", "10.0.2.15", "1", &AddrInfo{Family: unix.AF_INET6}, unix.EAFNOSUPPORT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := GetAddrInfo(tc.node, tc.service, tc.hints)
			if !errors.Is(err, tc.errno) {
				t.Errorf("got %+v, %v; want %v", res, err, tc.errno)
			}
		})
	}
	if _, err := GetAddrInfo("10.0.2.15", "no-such-service-rdmago", nil); err == nil {
		t.Error("an unknown service resolved")
	}
	// localhost resolves through /etc/hosts (or the resolver's fallback).
	res, err := GetAddrInfo("localhost", "1", &AddrInfo{Family: unix.AF_INET})
	if err != nil {
		t.Skipf("localhost does not resolve here: %v", err)
	}
	if !res.DstAddr.Addr().IsLoopback() {
		t.Errorf("localhost is %v", res.DstAddr)
	}
}
