package perf

// The out-of-band part of "rdmago perf": what perftest's benchmarks
// (linux-rdma/perftest 4.5-0.17, which calls itself version 6.06) send each
// other over TCP, without rdma_cm. Nothing here touches a device, so all of
// it is unit-tested on the host.
//
// Every step of the exchange is symmetric and lock-stepped: the client
// (the side given a host name) writes its message and then reads the
// server's; the server reads first and answers. The steps, in order:
//
//	version      16 bytes: the version text ("6.06"), NUL-padded
//	sys data     (peer version >= 5.32) two 4-byte big-endian ints, one step
//	             each: the page size ("cycle buffer") and the cache line
//	             size; each side then uses the larger of the two
//	MTU          (peer version >= 5.1) the ibv_mtu code as decimal text in
//	             2 bytes ("3\0"); 4 bytes before 5.31; both use the smaller
//	handshakes   one address message per step (see perfDest): the queue
//	             pairs' addresses, then the same message again as a mere
//	             synchronisation, as many times as each benchmark wants
//	BW report    (bandwidth benchmarks) the client's figures, one step per
//	             field: size (8 bytes), iterations (8 bytes from 5.33, else
//	             4), peak, average and message rate (IEEE doubles); all big
//	             endian
//	done         "done\0", written by both sides at the end and read by
//	             neither
//
// Which steps follow the handshakes, and how many handshakes there are,
// is each benchmark's own (see perfSteps in verbs.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

const (
	// perfVersion is the version rdmago announces: that of the perftest
	// whose exchange it speaks. The peer decides its message formats by it.
	perfVersion = "6.06"
	// perfVersionSize is sizeof(user_param->rem_version).
	perfVersionSize = 16
	// perfMinVersion is the oldest peer perftest itself accepts.
	perfMinVersion = 5.70

	// perfKeyMsgSize and perfKeyMsgSizeGID are the sizes of the address
	// message without and with a GID (KEY_MSG_SIZE, KEY_MSG_SIZE_GID):
	// the formatted text and its NUL.
	perfKeyMsgSize    = 59
	perfKeyMsgSizeGID = 108
)

// perfDone is the last message of each side: "done" with its NUL.
var perfDone = [5]byte{'d', 'o', 'n', 'e', 0}

// perfDest is one queue pair's address, as perftest's struct pingpong_dest
// carries it: LID, the number of outstanding reads and atomics it accepts,
// QP number, first PSN, the rkey and address of its buffer, GID and SRQ
// number (XRC and DC only; zero here).
type perfDest struct {
	LID      uint32
	OutReads uint32
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// msgSize is the size of an address message: with a GID when the local
// side uses one (a GID index), as perftest decides it.
func perfMsgSize(withGID bool) int {
	if withGID {
		return perfKeyMsgSizeGID
	}
	return perfKeyMsgSize
}

// encode returns d's address message, as perftest's ethernet_write_keys
// prints it: "LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:" then,
// with a GID, its 16 bytes as "xx:" each, then the SRQ number (8 digits)
// and, with a GID only, a final colon; lower-case hex, NUL-padded to the
// message size. A value wider than its field would overflow perftest's
// buffer, and is an error.
func (d perfDest) encode(withGID bool) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	if withGID {
		for _, c := range d.GID {
			fmt.Fprintf(&b, "%02x:", c)
		}
		fmt.Fprintf(&b, "%08x:", d.SRQN)
	} else {
		fmt.Fprintf(&b, "%08x", d.SRQN)
	}
	size := perfMsgSize(withGID)
	s := b.String()
	if len(s) != size-1 {
		return nil, fmt.Errorf("address %q does not fit in a %d-byte message", s, size)
	}
	m := make([]byte, size)
	copy(m, s)
	return m, nil
}

// decodePerfDest parses an address message. It accepts the fields as
// perftest's readers do (any number of hex digits each, within the field's
// type), but, unlike them, refuses anything else: a missing field, a
// non-hex digit, no NUL.
func decodePerfDest(m []byte, withGID bool) (perfDest, error) {
	var d perfDest
	if len(m) != perfMsgSize(withGID) {
		return d, fmt.Errorf("address message of %d bytes, want %d", len(m), perfMsgSize(withGID))
	}
	end := 0
	for end < len(m) && m[end] != 0 {
		end++
	}
	text := string(m[:end])
	if end == len(m) {
		return d, fmt.Errorf("malformed address message %q: no NUL terminator", text)
	}
	f := strings.Split(text, ":")
	want := 7
	if withGID {
		// Six numbers, sixteen GID bytes, the SRQ number and the empty
		// field after the last colon.
		want = 6 + 16 + 1 + 1
		if f[len(f)-1] != "" {
			return d, fmt.Errorf("malformed address message %q: no colon at the end", text)
		}
	}
	if len(f) != want {
		return d, fmt.Errorf("malformed address message %q: %d fields, want %d", text, len(f), want)
	}
	var err error
	num := func(i int, name string, bits int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		if v, err = parseHexBits(f[i], bits); err != nil {
			err = fmt.Errorf("malformed address message %q: %s: %v", text, name, err)
		}
		return v
	}
	d.LID = uint32(num(0, "LID", 32))
	d.OutReads = uint32(num(1, "outstanding reads", 32))
	d.QPN = uint32(num(2, "QPN", 32))
	d.PSN = uint32(num(3, "PSN", 32))
	d.RKey = uint32(num(4, "RKey", 32))
	d.VAddr = num(5, "VAddr", 64)
	if withGID {
		for i := range d.GID {
			d.GID[i] = byte(num(6+i, "GID", 8))
		}
		d.SRQN = uint32(num(22, "SRQN", 32))
	} else {
		d.SRQN = uint32(num(6, "SRQN", 32))
	}
	return d, err
}

// parseHexBits parses 1 to bits/4 hex digits (leading zeros beyond that
// are allowed).
func parseHexBits(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty field")
	}
	v, err := strconv.ParseUint(s, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("%q is not a %d-bit hex number", s, bits)
	}
	return v, nil
}

// perfAtof is C's atof for a version text: the leading decimal number, 0
// when there is none.
func perfAtof(s string) float64 {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	end := 0
	seenDot, seenDigit := false, false
	for end < len(s) {
		c := s[end]
		switch {
		case c >= '0' && c <= '9':
			seenDigit = true
		case c == '.' && !seenDot:
			seenDot = true
		case (c == '+' || c == '-') && end == 0:
		default:
			goto done
		}
		end++
	}
done:
	if !seenDigit {
		return 0
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return v
}

// perfConn is one side of the exchange on a stream (the TCP connection).
type perfConn struct {
	rw     io.ReadWriter
	client bool
	// peerVersion is the peer's version once exchanged; it selects the
	// formats of the later steps.
	peerVersion float64
	// cm: the exchange runs over rdma_cm (perfCMStream), one message per
	// write; the addresses then cross as perftest's struct itself, not
	// as text, and there is no final "done".
	cm bool
}

// perfStepError is a failed step; Text is the line perftest prints for it.
type perfStepError struct {
	Text string
	Err  error
}

func (e *perfStepError) Error() string { return e.Text + ": " + e.Err.Error() }
func (e *perfStepError) Unwrap() error { return e.Err }

// xchg is one step: the client writes mine and then reads into theirs,
// the server reads and then writes. Both buffers have the step's size.
func (c *perfConn) xchg(mine, theirs []byte) error {
	write := func() error {
		_, err := c.rw.Write(mine)
		return err
	}
	read := func() error {
		_, err := io.ReadFull(c.rw, theirs)
		return err
	}
	if c.client {
		if err := write(); err != nil {
			return &perfStepError{"Unable to write to socket/rdma_cm", err}
		}
		if err := read(); err != nil {
			return &perfStepError{"Unable to read from socket/rdma_cm", err}
		}
		return nil
	}
	if err := read(); err != nil {
		return &perfStepError{"Unable to read to socket/rdma_cm", err}
	}
	if err := write(); err != nil {
		return &perfStepError{"Unable to write from socket/rdma_cm", err}
	}
	return nil
}

// errPerfOldPeer is a peer older than perftest itself accepts; perftest
// then says "Current implementation is not compatible with versions older
// than 5.70".
var errPerfOldPeer = errors.New("the peer's perftest is older than 5.70")

// versions exchanges the versions (exchange_versions) and refuses a peer
// older than perftest accepts (check_version_compatibility). It returns
// the peer's version text.
func (c *perfConn) versions() (string, error) {
	var mine, theirs [perfVersionSize]byte
	copy(mine[:], perfVersion)
	if err := c.xchg(mine[:], theirs[:]); err != nil {
		return "", err
	}
	text := string(theirs[:])
	if i := strings.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	c.peerVersion = perfAtof(text)
	if c.peerVersion < perfMinVersion {
		return text, errPerfOldPeer
	}
	return text, nil
}

// sysData exchanges the page and cache line sizes (check_sys_data) and
// returns the larger of each pair.
func (c *perfConn) sysData(cycleBuffer, cacheLine int) (int, int, error) {
	if c.peerVersion < 5.32 {
		return cycleBuffer, cacheLine, nil
	}
	out := [2]int{cycleBuffer, cacheLine}
	for i, v := range out {
		var mine, theirs [4]byte
		binary.BigEndian.PutUint32(mine[:], uint32(int32(v)))
		if err := c.xchg(mine[:], theirs[:]); err != nil {
			return cycleBuffer, cacheLine, err
		}
		out[i] = max(v, int(int32(binary.BigEndian.Uint32(theirs[:]))))
	}
	return out[0], out[1], nil
}

// mtu exchanges the ibv_mtu codes (check_mtu) and returns the one to use:
// the peer's when it is valid and smaller than ours.
func (c *perfConn) mtu(mine int) (int, error) {
	if c.peerVersion < 5.1 {
		return mine, nil
	}
	size := 4
	if c.peerVersion >= 5.31 {
		size = 2
	}
	out := make([]byte, size)
	// sprintf("%d") into a 4-byte buffer, of which size bytes are sent.
	copy(out, strconv.Itoa(mine)+"\x00")
	in := make([]byte, size)
	if err := c.xchg(out, in); err != nil {
		return mine, err
	}
	// strtol(rem, NULL, 10): leading decimal digits.
	text := string(in)
	if i := strings.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	rem := int(cStrtol10(text))
	if rem >= 1 && rem <= 5 && mine > rem {
		return rem, nil
	}
	return mine, nil
}

// cStrtol10 is strtol(s, NULL, 10) within int32.
func cStrtol10(s string) int64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	var v int64
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int64(s[i]-'0')
		if v > math.MaxInt32 {
			v = math.MaxInt32
		}
	}
	if neg {
		v = -v
	}
	return v
}

// handshake exchanges one address message (ctx_hand_shake); withGID says
// whether the local side uses a GID, which decides the format for both.
func (c *perfConn) handshake(my perfDest, withGID bool) (perfDest, error) {
	if c.cm {
		mine := my.encodeStruct()
		theirs := make([]byte, len(mine))
		if err := c.xchg(mine, theirs); err != nil {
			return perfDest{}, err
		}
		return decodePerfDestStruct(theirs)
	}
	mine, err := my.encode(withGID)
	if err != nil {
		return perfDest{}, err
	}
	theirs := make([]byte, len(mine))
	if err := c.xchg(mine, theirs); err != nil {
		return perfDest{}, err
	}
	return decodePerfDest(theirs, withGID)
}

// perfBWReport is what a bandwidth benchmark measured (struct
// bw_report_data, the part that crosses the wire without dual-port
// reports).
type perfBWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// bwReport exchanges the bandwidth reports (xchg_bw_reports): the server
// learns the client's figures.
func (c *perfConn) bwReport(my perfBWReport) (perfBWReport, error) {
	var rem perfBWReport
	var b8, r8 [8]byte
	step := func(v uint64, n int) (uint64, error) {
		if n == 4 {
			binary.BigEndian.PutUint32(b8[:4], uint32(v))
		} else {
			binary.BigEndian.PutUint64(b8[:], v)
		}
		if err := c.xchg(b8[:n], r8[:n]); err != nil {
			return 0, err
		}
		if n == 4 {
			return uint64(binary.BigEndian.Uint32(r8[:4])), nil
		}
		return binary.BigEndian.Uint64(r8[:]), nil
	}
	var err error
	if rem.Size, err = step(my.Size, 8); err != nil {
		return rem, err
	}
	itersSize := 4
	if c.peerVersion >= 5.33 {
		itersSize = 8
	}
	if rem.Iters, err = step(my.Iters, itersSize); err != nil {
		return rem, err
	}
	for _, f := range []struct {
		mine float64
		rem  *float64
	}{{my.BWPeak, &rem.BWPeak}, {my.BWAvg, &rem.BWAvg}, {my.MsgRate, &rem.MsgRate}} {
		v, err := step(math.Float64bits(f.mine), 8)
		if err != nil {
			return rem, err
		}
		*f.rem = math.Float64frombits(v)
	}
	return rem, nil
}

// done writes the final "done" (ctx_close_connection's last write); over
// rdma_cm perftest writes none.
func (c *perfConn) done() error {
	if c.cm {
		return nil
	}
	_, err := c.rw.Write(perfDone[:])
	return err
}

// perfDestStructSize is sizeof(struct pingpong_dest) on the 64-bit
// targets: five ints, padding, the 8-byte address, the GID, the SRQ number
// and the GID index.
const perfDestStructSize = 56

// encodeStruct returns d as perftest's rdma_write_keys sends it over
// rdma_cm: struct pingpong_dest with each number big-endian, the GID as
// is. The GID index, which only perftest's own side uses, is 0.
func (d perfDest) encodeStruct() []byte {
	m := make([]byte, perfDestStructSize)
	be := binary.BigEndian
	be.PutUint32(m[0:], d.LID)
	be.PutUint32(m[4:], d.OutReads)
	be.PutUint32(m[8:], d.QPN)
	be.PutUint32(m[12:], d.PSN)
	be.PutUint32(m[16:], d.RKey)
	be.PutUint64(m[24:], d.VAddr)
	copy(m[32:48], d.GID[:])
	be.PutUint32(m[48:], d.SRQN)
	return m
}

// decodePerfDestStruct reads an address sent by encodeStruct, taking the
// fields rdma_read_keys takes (not the SRQ number). A message shorter than
// the struct is an error.
func decodePerfDestStruct(m []byte) (perfDest, error) {
	if len(m) < perfDestStructSize {
		return perfDest{}, fmt.Errorf("address message of %d bytes, want %d", len(m), perfDestStructSize)
	}
	be := binary.BigEndian
	d := perfDest{
		LID:      be.Uint32(m[0:]),
		OutReads: be.Uint32(m[4:]),
		QPN:      be.Uint32(m[8:]),
		PSN:      be.Uint32(m[12:]),
		RKey:     be.Uint32(m[16:]),
		VAddr:    be.Uint64(m[24:]),
	}
	copy(d.GID[:], m[32:48])
	return d, nil
}
