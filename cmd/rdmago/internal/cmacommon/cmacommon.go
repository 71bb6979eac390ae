// Package cmacommon is what rdmago's ports of librdmacm's examples
// (udaddy, ucmatose, cmtime, mckey) share, as the C programs share
// common.c: the event channel that reports a host without RDMA devices,
// get_rdma_addr and its getaddrinfo error codes, and the reading of -f.
package cmacommon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/uverbs"
)

// AFIB is the family -f gid asks for: AF_IB addresses (sockaddr_ib),
// which package cm cannot bind or resolve.
const AFIB = 27

// HasPrefixFold is strncasecmp(prefix, s, len(prefix)) == 0.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// AddrFormat reads -f as the examples do: "ip..." for numeric hosts,
// "gid..." for AF_IB, "name..." for names (the default), and a warning
// for anything else.
func AddrFormat(arg string, h *cm.AddrInfo, stderr io.Writer) {
	switch {
	case HasPrefixFold(arg, "ip"):
		h.Flags = cm.AINumericHost
	case HasPrefixFold(arg, "gid"):
		h.Flags = cm.AINumericHost | cm.AIFamily
		h.Family = AFIB
	case !HasPrefixFold(arg, "name"):
		fmt.Fprintf(stderr, "Warning: unknown address format\n")
	}
}

// OpenChannel is create_first_event_channel: the event channel, or nil
// after saying why not on stderr.
func OpenChannel(stderr io.Writer) *cm.EventChannel {
	// librdmacm will not open its channel on a host without RDMA devices.
	if devs, err := uverbs.Devices(); errors.Is(err, uverbs.ErrNoDevice) || (err == nil && len(devs) == 0) {
		fmt.Fprintf(stderr, "No RDMA devices were detected\n")
		return nil
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			fmt.Fprintf(stderr, "No RDMA devices were detected\n")
		} else {
			io.WriteString(stderr, clib.Perror("failed to create RDMA CM event channel", err))
		}
		return nil
	}
	return ch
}

// Addr is what get_rdma_addr reads: -b, -s, the port and the hints.
type Addr struct {
	Src, Dst, Port string
	Hints          cm.AddrInfo
}

// ErrnoRet is what a failed librdmacm call returns: -1 (its errno is
// what perror prints).
const ErrnoRet = -1

// Get is get_rdma_addr: the passive side's address (Hints has
// AIPassive), or the peer's with the bound source. It prints a failure as
// v44.0's examples do, "<prog>: <what> error: <gai_strerror>" (without
// "<prog>: " when prog is empty, as cmtime prints it), and returns
// getaddrinfo's code.
func (a Addr) Get(ctx context.Context, prog, what string, stdout, stderr io.Writer) (*cm.AddrInfo, int) {
	if a.Hints.Family == AFIB {
		// Package cm has no AF_IB (sockaddr_ib) addresses. On RoCE the C
		// programs fail later, binding or resolving the route (ENODEV).
		fmt.Fprintf(stderr, "%s: address format gid (AF_IB) is not supported by rdmago\n", prog)
		return nil, ErrnoRet
	}
	h := a.Hints
	var res *cm.AddrInfo
	var err error
	if h.Flags&cm.AIPassive != 0 {
		res, err = cm.GetAddrInfoContext(ctx, a.Src, a.Port, &h)
	} else {
		if a.Src != "" {
			sh := h
			sh.Flags |= cm.AIPassive
			var src *cm.AddrInfo
			if src, err = cm.GetAddrInfoContext(ctx, a.Src, "", &sh); err == nil {
				h.SrcAddr = src.SrcAddr
			}
		}
		if err == nil {
			res, err = cm.GetAddrInfoContext(ctx, a.Dst, a.Port, &h)
		}
	}
	if err != nil {
		code, msg := GAIError(err)
		if prog != "" {
			fmt.Fprintf(stdout, "%s: ", prog)
		}
		fmt.Fprintf(stdout, "%s error: %s\n", what, msg)
		return nil, code
	}
	return res, 0
}

// GAIError is getaddrinfo's code and gai_strerror's text for a failed
// GetAddrInfo.
func GAIError(err error) (int, string) {
	var de *net.DNSError
	var ae *net.AddrError
	switch {
	case errors.As(err, &de):
		if de.IsTemporary || de.IsTimeout {
			return -3, "Temporary failure in name resolution" // EAI_AGAIN
		}
		if strings.Contains(de.Err, "port") || strings.Contains(de.Err, "service") {
			return -8, "Servname not supported for ai_socktype" // EAI_SERVICE
		}
		return -2, "Name or service not known" // EAI_NONAME
	case errors.As(err, &ae):
		return -8, "Servname not supported for ai_socktype"
	case errors.Is(err, unix.EAFNOSUPPORT):
		return -9, "Address family for hostname not supported" // EAI_ADDRFAMILY
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return -8, "Servname not supported for ai_socktype"
	}
	return -2, "Name or service not known"
}
