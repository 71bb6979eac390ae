// Package inetaddr resolves host:port addresses for the connections that
// rdma_cm makes over IP (rsockets, Valkey's RDMA transport), as package net
// resolves TCP addresses.
package inetaddr

import (
	"context"
	"net"
	"net/netip"
	"strconv"
)

// Family restricts a resolution to one IP family.
type Family int

// Families: any, IPv4 only, IPv6 only.
const (
	Any Family = 0
	IP4 Family = 4
	IP6 Family = 6
)

// Resolve turns host:port into an address of the family. A passive
// resolution (a listener's) takes an empty host as the unspecified address
// (IPv4 for IP4, IPv6 otherwise), as net.ResolveTCPAddr does; an active one
// (a dial's) takes it as the local system, as net.Dial does. network names
// the caller's network in errors.
func Resolve(ctx context.Context, network string, f Family, address string, passive bool) (netip.AddrPort, error) {
	host, service, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "tcp", service)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if port < 0 || port > 0xffff {
		return netip.AddrPort{}, &net.AddrError{Err: "invalid port", Addr: strconv.Itoa(port)}
	}
	if host == "" {
		if !passive {
			host = "localhost"
		} else if f == IP4 {
			return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), nil
		} else {
			return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)), nil
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if !f.has(a) {
			return netip.AddrPort{}, &net.AddrError{Err: "address of the wrong family for " + network, Addr: host}
		}
		return netip.AddrPortFrom(a, uint16(port)), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for _, a := range addrs {
		if a = a.Unmap(); f.has(a) {
			return netip.AddrPortFrom(a, uint16(port)), nil
		}
	}
	return netip.AddrPort{}, &net.AddrError{Err: "no suitable address found", Addr: host}
}

func (f Family) has(a netip.Addr) bool {
	switch f {
	case IP4:
		return a.Is4()
	case IP6:
		return a.Is6()
	}
	return true
}
