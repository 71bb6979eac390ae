// Package clib emulates the pieces of the C libraries that rdmago's tools
// print through, so that their output matches the C programs' byte for byte:
// glibc's strtol, strtoul and atoi, strerror, perror and gai_strerror,
// printf's %.Nf and inet_ntop for IPv6, and the MTU conversion of
// rdma-core's examples (pp_mtu_to_enum).
package clib

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdmago/rdma/qp"
)

// Strtol converts s as C's strtol(s, NULL, 0) does: leading white space,
// an optional sign, then a number in hexadecimal ("0x"), octal (leading
// "0") or decimal, up to the first character that is not a digit of the
// base; no digits at all give 0; overflow saturates at the int64 limits.
func Strtol(s string) int64 {
	i, neg, base := numberStart(s)
	limit := uint64(1<<63 - 1)
	if neg {
		limit = 1 << 63
	}
	var v uint64
	overflow := false
	for ; i < len(s); i++ {
		d := DigitVal(s[i])
		if d >= base {
			break
		}
		if v > (limit-d)/base {
			overflow = true
			continue
		}
		v = v*base + d
	}
	switch {
	case overflow && neg:
		return -1 << 63
	case overflow:
		return 1<<63 - 1
	case neg:
		return int64(-v)
	}
	return int64(v)
}

// numberStart reads what strtol and strtoul read before the digits: white
// space, a sign and the base prefix. i is the index of the first digit.
func numberStart(s string) (i int, neg bool, base uint64) {
	for i < len(s) && bytes.IndexByte([]byte(" \t\n\v\f\r"), s[i]) >= 0 {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base = 10
	if i < len(s) && s[i] == '0' {
		base = 8
		if i+2 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') && DigitVal(s[i+2]) < 16 {
			base = 16
			i += 2
		}
	}
	return i, neg, base
}

// DigitVal is the value of c as a digit in bases up to 36, or 36.
func DigitVal(c byte) uint64 {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0')
	case 'a' <= c && c <= 'z':
		return uint64(c-'a') + 10
	case 'A' <= c && c <= 'Z':
		return uint64(c-'A') + 10
	}
	return 36
}

// MTUEnum is pp_mtu_to_enum: a path MTU in bytes to its code, 0 if invalid.
func MTUEnum(bytes int32) qp.MTU {
	switch bytes {
	case 256:
		return qp.MTU256
	case 512:
		return qp.MTU512
	case 1024:
		return qp.MTU1024
	case 2048:
		return qp.MTU2048
	case 4096:
		return qp.MTU4096
	}
	return 0
}

// Strtoul converts s as C's strtoul(s, NULL, 0) does: like strtol, but a
// minus sign negates in unsigned arithmetic ("-1" is the largest value),
// and values past the largest saturate to it.
func Strtoul(s string) uint64 {
	i, neg, base := numberStart(s)
	var v uint64
	for ; i < len(s); i++ {
		d := DigitVal(s[i])
		if d >= base {
			break
		}
		if v > (^uint64(0)-d)/base {
			return ^uint64(0)
		}
		v = v*base + d
	}
	if neg {
		return -v
	}
	return v
}

// Atoi is C's atoi: strtol in base 10, truncated to an int.
func Atoi(s string) int32 {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit = 1 << 63
	}
	var v uint64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if v > (limit-d)/10 {
			v = limit // strtol saturates, and atoi truncates that
			continue
		}
		v = v*10 + d
	}
	l := int64(v)
	if neg {
		l = int64(-v)
	}
	return int32(l)
}

// Errno is the errno err carries (what a C call would have set), or -1.
func Errno(err error) int {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return int(e)
	}
	return -1
}

// Strerror renders err as perror does: the C library's message for an
// errno (Go's, with C's initial capital), or the error's own text.
func Strerror(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		s := e.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}

// Perror renders a system error as C's perror(prefix) does. A read that hit
// the end of the stream set no errno: perror then prints "Success".
func Perror(prefix string, err error) string {
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		return prefix + ": " + Strerror(en) + "\n"
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return prefix + ": Success\n"
	}
	return prefix + ": " + err.Error() + "\n"
}

// Fixed2 formats x as glibc's printf("%.2f") does, infinities and NaNs
// included.
func Fixed2(x float64) string { return FormatFloat(x, 2) }

// GaiStrerror is gai_strerror for a failed name lookup.
func GaiStrerror(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return "Name or service not known"
		case de.IsTemporary, de.IsTimeout:
			return "Temporary failure in name resolution"
		}
	}
	return err.Error()
}

// FormatFloat formats x as glibc's printf("%.<prec>f") does, infinities
// and NaNs included.
func FormatFloat(x float64, prec int) string {
	switch {
	case math.IsNaN(x):
		if math.Signbit(x) {
			return "-nan"
		}
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// Inet6String formats a 16-byte IPv6 address exactly as glibc's
// inet_ntop(AF_INET6, ...) does. That differs from net/netip (RFC 5952) in
// one respect: besides "::ffff:a.b.c.d" (IPv4-mapped, which both print),
// glibc prints the deprecated IPv4-compatible form "::a.b.c.d" whenever the
// first six groups are zero and the seventh is not; netip prints hex
// groups there ("::102:304"). The rest is shared: hex groups without
// leading zeros, the longest run of two or more zero groups (the first such
// run on a tie) compressed to "::", a single zero group left as "0".
func Inet6String(a [16]byte) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	// Find the longest run of zero groups; the first one wins a tie.
	bestBase, bestLen := -1, 0
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestBase, bestLen = i, j-i
		}
		i = j
	}
	if bestLen < 2 {
		bestBase = -1
	}

	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		// An IPv4 address in the last 32 bits: IPv4-compatible (first six
		// groups zero) or IPv4-mapped (first five zero, then ffff).
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", a[12], a[13], a[14], a[15])
			return b.String()
		}
		b.WriteString(strconv.FormatUint(uint64(w[i]), 16))
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}

// CloseIf closes p unless it is nil, as the C tools' cleanup frees only
// what was made; an error closing is of no use by then.
func CloseIf[T any, P interface {
	*T
	Close() error
}](p P) {
	if p != nil {
		p.Close()
	}
}
