package pingpong

// The out-of-band part of "rdmago pingpong": what rdma-core's pingpong
// examples (libibverbs/examples/*_pingpong.c, v44.0) send each other over
// TCP before the first RDMA packet, and the lines they print. Nothing here
// touches a device, so all of it is unit-tested on the host.
//
// The wire format: each queue pair is described by one fixed-size message,
// the text "LLLL:QQQQQQ:PPPPPP:GGGG…" (LID, QP number and first PSN in
// lower-case hex, zero-padded to 4, 6 and 6 digits, then the GID as 32 hex
// digits) followed by NUL bytes up to ppMsgSize (52) bytes. The client
// speaks first:
//
//	client → server   its address message(s)
//	                  (the server moves its QPs to RTR and RTS)
//	server → client   its address message(s)
//	client → server   "done\x00" (5 bytes)
//
// ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong send one message
// each way. ibv_srq_pingpong always sends ppSRQSlots (256) of them, those
// past its -q queue pairs all zeros, and uses the first -q it receives.

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
)

const (
	// ppMsgSize is the size of one address message: the C programs' buffer,
	// sizeof "0000:000000:000000:" plus 32 GID digits, with its NUL.
	ppMsgSize = 52
	// ppSRQSlots is how many address messages ibv_srq_pingpong sends each
	// way (its MAX_QP), whatever its number of queue pairs.
	ppSRQSlots = 256
)

// ppDone is the client's last message: "done" with its terminating NUL.
var ppDone = [5]byte{'d', 'o', 'n', 'e', 0}

// ppDest is one queue pair's address, as the C programs' struct
// pingpong_dest holds it. The numbers are as wide as the text may carry.
type ppDest struct {
	LID uint32
	QPN uint32
	PSN uint32
	GID [16]byte
}

// wireGID renders a GID as the C programs' gid_to_wire_gid does. That
// function loads each 32-bit word in host order, converts it to big endian
// and prints it with "%08x", which on any host amounts to the sixteen bytes
// in memory order, two lower-case hex digits each.
func wireGID(g [16]byte) string {
	const digits = "0123456789abcdef"
	var b [32]byte
	for i, c := range g {
		b[2*i], b[2*i+1] = digits[c>>4], digits[c&0xf]
	}
	return string(b[:])
}

// parseWireGID is the inverse of wireGID (the C programs' wire_gid_to_gid):
// exactly 32 hex digits, either case.
func parseWireGID(s string) ([16]byte, error) {
	var g [16]byte
	if len(s) != 32 {
		return g, fmt.Errorf("GID %q: want 32 hex digits, got %d characters", s, len(s))
	}
	for i := range g {
		hi, lo := hexVal(s[2*i]), hexVal(s[2*i+1])
		if hi > 15 || lo > 15 {
			return g, fmt.Errorf("GID %q: %q is not a hex digit", s, s[2*i:2*i+2])
		}
		g[i] = hi<<4 | lo
	}
	return g, nil
}

func hexVal(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}

// encode returns d's address message, as sprintf("%04x:%06x:%06x:%s") into
// the C programs' 52-byte buffer writes it: the text, then NULs.
func (d ppDest) encode() ([ppMsgSize]byte, error) {
	var m [ppMsgSize]byte
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN, d.PSN, wireGID(d.GID))
	if len(s) >= ppMsgSize {
		return m, fmt.Errorf("address %q does not fit in a %d-byte message", s, ppMsgSize)
	}
	copy(m[:], s)
	return m, nil
}

// decodeDest parses an address message. It accepts what the C programs'
// sscanf("%x:%x:%x:%s") followed by wire_gid_to_gid reads correctly: three
// hex numbers of 1 to 8 digits separated by colons, a colon, a GID of 32
// hex digits, then a NUL; anything else is an error that quotes the text.
func decodeDest(m [ppMsgSize]byte) (ppDest, error) {
	var d ppDest
	end := 0
	for end < len(m) && m[end] != 0 {
		end++
	}
	text := string(m[:end])
	if end == len(m) {
		return d, fmt.Errorf("malformed address message %q: no NUL terminator in %d bytes", text, ppMsgSize)
	}
	f := strings.Split(text, ":")
	if len(f) != 4 {
		return d, fmt.Errorf("malformed address message %q: want LID:QPN:PSN:GID", text)
	}
	var nums [3]uint32
	for i, name := range []string{"LID", "QPN", "PSN"} {
		v, err := parseHex32(f[i])
		if err != nil {
			return d, fmt.Errorf("malformed address message %q: %s: %v", text, name, err)
		}
		nums[i] = v
	}
	g, err := parseWireGID(f[3])
	if err != nil {
		return d, fmt.Errorf("malformed address message %q: %v", text, err)
	}
	return ppDest{LID: nums[0], QPN: nums[1], PSN: nums[2], GID: g}, nil
}

// parseHex32 parses 1 to 8 hex digits.
func parseHex32(s string) (uint32, error) {
	if len(s) == 0 || len(s) > 8 {
		return 0, fmt.Errorf("%q: want 1 to 8 hex digits", s)
	}
	var v uint32
	for i := 0; i < len(s); i++ {
		d := hexVal(s[i])
		if d > 15 {
			return 0, fmt.Errorf("%q: %q is not a hex digit", s, s[i:i+1])
		}
		v = v<<4 | uint32(d)
	}
	return v, nil
}

// ppProto is the exchange of one of the C programs.
type ppProto struct {
	// slots is the number of address messages sent each way: 1, or
	// ppSRQSlots for ibv_srq_pingpong.
	slots int
	// srq selects ibv_srq_pingpong's error messages.
	srq bool
}

// ppError is a failure the C programs report with fixed lines on stderr.
// Text is those lines; Err, if set, is the cause (also printed, as perror
// would, where the C program calls it).
type ppError struct {
	Text string
	Err  error
}

func (e *ppError) Error() string {
	if e.Err != nil {
		return e.Text + ": " + e.Err.Error()
	}
	return e.Text
}
func (e *ppError) Unwrap() error { return e.Err }

// writeDests sends the local addresses, padded with zero addresses to the
// protocol's slot count.
func (p ppProto) writeDests(w io.Writer, local []ppDest) error {
	for i := 0; i < p.slots; i++ {
		var d ppDest
		if i < len(local) {
			d = local[i]
		}
		m, err := d.encode()
		if err != nil {
			return err
		}
		if _, err := w.Write(m[:]); err != nil {
			return err
		}
	}
	return nil
}

// readDests reads the protocol's slot count of address messages. It
// returns how many whole messages it read and, on failure, how many bytes
// of the next one.
func (p ppProto) readDests(r io.Reader) (dests []ppDest, got, partial int, err error) {
	var m [ppMsgSize]byte
	for got = 0; got < p.slots; got++ {
		n, err := io.ReadFull(r, m[:])
		if err != nil {
			return dests, got, n, err
		}
		d, err := decodeDest(m)
		if err != nil {
			return dests, got, ppMsgSize, err
		}
		dests = append(dests, d)
	}
	return dests, got, 0, nil
}

// client runs the client's side of the exchange on conn: it sends local,
// reads the server's addresses and answers "done". The error, a *ppError,
// carries the lines the C client prints.
func (p ppProto) client(conn io.ReadWriter, local []ppDest) ([]ppDest, error) {
	if err := p.writeDests(conn, local); err != nil {
		return nil, &ppError{Text: "Couldn't send local address", Err: err}
	}
	remote, got, partial, err := p.readDests(conn)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isSysErr(err) {
			if p.srq {
				return nil, &ppError{Text: clib.Perror("client read", err) +
					fmt.Sprintf("%d/%d: Couldn't read remote address [%d]", partial, ppMsgSize, got)}
			}
			return nil, &ppError{Text: clib.Perror("client read/write", err) + "Couldn't read/write remote address"}
		}
		return nil, &ppError{Text: "Couldn't read remote address", Err: err}
	}
	if _, err := conn.Write(ppDone[:]); err != nil {
		if p.srq {
			return nil, &ppError{Text: strings.TrimSuffix(clib.Perror("client write", err), "\n")}
		}
		return nil, &ppError{Text: clib.Perror("client read/write", err) + "Couldn't read/write remote address"}
	}
	return remote, nil
}

// server runs the server's side on conn: it reads the client's addresses,
// calls connect with them (the C servers move their QPs to RTS before they
// answer), sends local and waits for the client's "done".
func (p ppProto) server(conn io.ReadWriter, local []ppDest, connect func(remote []ppDest) error) ([]ppDest, error) {
	remote, got, partial, err := p.readDests(conn)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isSysErr(err) {
			text := clib.Perror("server read", err)
			if p.srq {
				text += fmt.Sprintf("%d/%d: Couldn't read remote address [%d]", partial, ppMsgSize, got)
			} else {
				text += fmt.Sprintf("%d/%d: Couldn't read remote address", partial, ppMsgSize)
			}
			return nil, &ppError{Text: text}
		}
		return nil, &ppError{Text: "Couldn't read remote address", Err: err}
	}
	if err := connect(remote); err != nil {
		return nil, &ppError{Text: err.Error() + "\nCouldn't connect to remote QP"}
	}
	if err := p.writeDests(conn, local); err != nil {
		if p.srq {
			return nil, &ppError{Text: "Couldn't send local address", Err: err}
		}
		return nil, &ppError{Text: "Couldn't send/recv local address", Err: err}
	}
	var done [len(ppDone)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil {
		if p.srq {
			return nil, &ppError{Text: strings.TrimSuffix(clib.Perror("client write", err), "\n")}
		}
		return nil, &ppError{Text: "Couldn't send/recv local address", Err: err}
	}
	if done != ppDone {
		return nil, &ppError{Text: fmt.Sprintf("Couldn't send/recv local address: the client ended with %q, want %q", done[:], ppDone[:])}
	}
	return remote, nil
}

func isSysErr(err error) bool {
	var en syscall.Errno
	return errors.As(err, &en)
}

// ppAddressLine is the line the C programs print for an address: "local"
// or "remote", then the LID, QPN, PSN and GID (through inet_ntop). udLocal
// selects ibv_ud_pingpong's local line, which has a colon before "GID"
// where the others have a comma.
func ppAddressLine(which string, d ppDest, udLocal bool) string {
	sep := ","
	if udLocal {
		sep = ":"
	}
	pad := " "
	if which == "local" {
		pad = "  "
	}
	return fmt.Sprintf("  %s address:%sLID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
		which, pad, d.LID, d.QPN, d.PSN, sep, clib.Inet6String(d.GID))
}

// ppReport returns the two result lines the C programs print after usec
// microseconds of size-byte exchanges, computed with their types: the time
// is a C float, the byte count a long long, and the per-iteration time a
// float divided by a float.
func ppReport(size, iters uint32, usec int64) string {
	fusec := float32(usec)
	bytes := int64(size) * int64(iters) * 2
	secs := float64(fusec) / 1000000.
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		bytes, clib.Fixed2(secs), clib.Fixed2(float64(bytes)*8./float64(fusec)),
		int32(iters), clib.Fixed2(secs), clib.Fixed2(float64(fusec/float32(iters))))
}

// ppTSStats is ibv_rc_pingpong's struct ts_params: the clock cycles
// between successive receive completions, from their timestamps (-t).
type ppTSStats struct {
	mask               uint64 // the device's completion_timestamp_mask
	maxDelta, minDelta uint64
	total              uint64
	prev               uint64
	havePrev           bool   // last_comp_with_ts
	iters              uint32 // comp_with_time_iters, an unsigned int in C
}

// newPPTSStats starts the statistics as the C program does, the minimum
// at 0xffffffff.
func newPPTSStats(mask uint64) ppTSStats {
	return ppTSStats{mask: mask, minDelta: 0xffffffff}
}

// add counts one receive completion's timestamp: the cycles since the
// previous one, across one wrap of the mask-wide clock where it went
// backwards (parse_single_wc).
func (s *ppTSStats) add(ts uint64) {
	if s.havePrev {
		var delta uint64
		if ts >= s.prev {
			delta = ts - s.prev
		} else {
			delta = s.mask - s.prev + ts + 1
		}
		s.maxDelta = max(s.maxDelta, delta)
		s.minDelta = min(s.minDelta, delta)
		s.total += delta
		s.iters++
	}
	s.prev = ts
	s.havePrev = true
}

// report returns the three lines the C program prints after its results,
// or nothing when no two receives had timestamps.
func (s *ppTSStats) report() string {
	if s.iters == 0 {
		return ""
	}
	return fmt.Sprintf("Max receive completion clock cycles = %d\nMin receive completion clock cycles = %d\nAverage receive completion clock cycles = %f\n",
		s.maxDelta, s.minDelta, float64(s.total)/float64(s.iters))
}
