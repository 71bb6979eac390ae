package cmacommon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
)

func TestGAIError(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, -2},
		{&net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}, -3},
		{&net.DNSError{Err: "unknown port", Name: "udp/foo"}, -8},
		{errors.Join(errors.New("numeric"), unix.EINVAL), -2},
		{errors.Join(errors.New("family"), unix.EAFNOSUPPORT), -9},
		// rdma_server and rdma_client's cases, from when rdmaserver had a
		// copy of its own.
		{&net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, -3},
		{&net.DNSError{Err: "unknown port", Name: "tcp/foo"}, -8},
		{&net.AddrError{Err: "invalid port", Addr: "99999"}, -8},
		{fmt.Errorf("getaddrinfo: %w", unix.EAFNOSUPPORT), -9},
		{fmt.Errorf("x: %w", &strconv.NumError{Func: "ParseUint", Num: "1", Err: strconv.ErrRange}), -8},
		{errors.New("other"), -2},
	} {
		if code, msg := GAIError(c.err); code != c.code || msg == "" {
			t.Errorf("GAIError(%v) = %d %q, want %d", c.err, code, msg, c.code)
		}
	}
}

func TestAddrFormat(t *testing.T) {
	for _, c := range []struct {
		arg    string
		want   cm.AddrInfo
		stderr string
	}{
		{"ip", cm.AddrInfo{Flags: cm.AINumericHost}, ""},
		{"IPv6", cm.AddrInfo{Flags: cm.AINumericHost}, ""},
		{"gidx", cm.AddrInfo{Flags: cm.AINumericHost | cm.AIFamily, Family: AFIB}, ""},
		{"Name", cm.AddrInfo{}, ""},
		{"nam", cm.AddrInfo{}, "Warning: unknown address format\n"},
		{"i", cm.AddrInfo{}, "Warning: unknown address format\n"},
	} {
		var h cm.AddrInfo
		var e bytes.Buffer
		AddrFormat(c.arg, &h, &e)
		if h.Flags != c.want.Flags || h.Family != c.want.Family || e.String() != c.stderr {
			t.Errorf("-f %q: flags %v family %d stderr %q; want %v %d %q", c.arg, h.Flags, h.Family, e.String(), c.want.Flags, c.want.Family, c.stderr)
		}
	}
}

// Get's failure line: "<prog>: <what> error: ..." as cmatose prints it,
// "<what> error: ..." for an empty prog, as cmtime does.
func TestGetFailureLine(t *testing.T) {
	for _, c := range []struct{ prog, want string }{
		{"cmatose", "cmatose: getaddrinfo error: Servname not supported for ai_socktype\n"},
		{"", "getaddrinfo error: Servname not supported for ai_socktype\n"},
	} {
		var o, e bytes.Buffer
		a := Addr{Dst: "10.0.2.15", Port: "no-such-port-name", Hints: cm.AddrInfo{Flags: cm.AINumericHost}}
		res, code := a.Get(t.Context(), c.prog, "getaddrinfo", &o, &e)
		if res != nil || code != -8 || o.String() != c.want || e.Len() != 0 {
			t.Errorf("prog %q: %v, code %d, stdout %q, stderr %q; want code -8, %q", c.prog, res, code, o.String(), e.String(), c.want)
		}
	}
}
