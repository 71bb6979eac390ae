package rping

// The pure parts of "rdmago rping": what rdma-core's rping
// (librdmacm/examples/rping.c, v44.0) puts on the wire, the data it pings
// and the states it reports by number. Nothing here touches a device, so
// all of it is unit-tested on the host.
//
// The protocol. After the rdma_cm connection is up, the client loops, and
// the server answers until the client disconnects:
//
//	client: fill its source buffer with this ping's text
//	client → server  send: source buffer's address, rkey, size (rpInfo)
//	server: RDMA read of that many bytes into its own buffer
//	server → client  send: "go ahead" (an rpInfo of zeros)
//	client → server  send: sink buffer's address, rkey, size
//	server: RDMA write of its buffer's C string, NUL included, to the sink
//	server → client  send: "go ahead"
//	client: with -V, the sink must equal the source
//
// Each message is one 16-byte rpInfo; both sides keep one receive posted
// and post the next as soon as one completes.

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
)

// rpInfoSize is the size of struct rping_rdma_info on the wire.
const rpInfoSize = 16

// rpInfo is struct rping_rdma_info: a buffer the peer may read or write,
// all fields big endian on the wire.
type rpInfo struct {
	Addr uint64 // __be64 buf
	RKey uint32 // __be32 rkey
	Size uint32 // __be32 size
}

// encode writes the message into b (at least rpInfoSize bytes).
func (m rpInfo) encode(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], m.Addr)
	binary.BigEndian.PutUint32(b[8:12], m.RKey)
	binary.BigEndian.PutUint32(b[12:16], m.Size)
}

// decodeRpInfo reads a message from b; fewer than rpInfoSize bytes are an
// error.
func decodeRpInfo(b []byte) (rpInfo, error) {
	if len(b) < rpInfoSize {
		return rpInfo{}, fmt.Errorf("rping message of %d bytes, want %d", len(b), rpInfoSize)
	}
	return rpInfo{
		Addr: binary.BigEndian.Uint64(b[0:8]),
		RKey: binary.BigEndian.Uint32(b[8:12]),
		Size: binary.BigEndian.Uint32(b[12:16]),
	}, nil
}

// Sizes of the ping data (-S). rping's RPING_MIN_BUFSIZE is
// sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT), where INT_MAX is not
// a macro in that file, so it is sizeof("INT_MAX") + sizeof("rdma-ping-%d:
// ") = 8 + 15; the largest accepted size is one less than RPING_BUFSIZE,
// which its message quotes as the upper bound.
const (
	rpMinSize     = 23
	rpBufSize     = 64 * 1024
	rpDefaultSize = 64
	rpDefaultPort = 7174
	// rpSQDepth is RPING_SQ_DEPTH: send queue depth; the CQ holds twice it.
	rpSQDepth = 16
	// rpFirstChar and rpLastChar bound the pattern after the ping's
	// header: 'A' to 'z'.
	rpFirstChar = 65
	rpLastChar  = 122
)

// rpSizeOK reports whether rping accepts size for -S.
func rpSizeOK(size int32) bool { return size >= rpMinSize && size <= rpBufSize-1 }

// rpFill writes ping number ping into buf as rping's client does: the
// header "rdma-ping-N: " as snprintf(buf, len(buf), …) writes it, then,
// from the header's full length on, the characters from start upwards,
// wrapping from 'z' to 'A', and a NUL in the last byte.
func rpFill(buf []byte, ping int32, start int) {
	size := len(buf)
	if size == 0 {
		return
	}
	hdr := "rdma-ping-" + strconv.Itoa(int(ping)) + ": "
	n := copy(buf[:size-1], hdr)
	buf[n] = 0
	c := byte(start)
	for i := len(hdr); i < size; i++ {
		buf[i] = c
		c++
		if c > rpLastChar {
			c = rpFirstChar
		}
	}
	buf[size-1] = 0
}

// rpNextStart is the first pattern character of the ping after one that
// started with start.
func rpNextStart(start int) int {
	start++
	if start > rpLastChar {
		start = rpFirstChar
	}
	return start
}

// rpPingText is what the client's -v prints after "ping data: " for ping
// number ping of size bytes: the buffer rpFill makes, as a C string.
func rpPingText(ping int32, size int) string {
	buf := make([]byte, size)
	rpFill(buf, ping, rpFirstChar+int(ping%(rpLastChar-rpFirstChar+1)))
	return cStr(buf)
}

// cStr returns the C string at the start of b: up to its first NUL, or all
// of b if it has none.
func cStr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// cStrlen is strlen bounded by the buffer.
func cStrlen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// rpState is rping's enum test_state; its messages print the number.
type rpState int

const (
	rpIdle rpState = iota + 1
	rpConnectRequest
	rpAddrResolved
	rpRouteResolved
	rpConnected
	rpReadAdv
	rpReadComplete
	rpWriteAdv
	rpWriteComplete
	rpDisconnected
	rpError
)

var rpStateNames = [...]string{"IDLE", "CONNECT_REQUEST", "ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECTED",
	"RDMA_READ_ADV", "RDMA_READ_COMPLETE", "RDMA_WRITE_ADV", "RDMA_WRITE_COMPLETE", "DISCONNECTED", "ERROR"}

func (s rpState) String() string {
	if s >= rpIdle && int(s) <= len(rpStateNames) {
		return rpStateNames[s-1]
	}
	return fmt.Sprintf("rpState(%d)", int(s))
}

// rpSem is a counting semaphore (rping's sem_t): post never blocks, wait
// takes one post or gives up when ctx ends.
type rpSem struct {
	mu   sync.Mutex
	n    int
	wake chan struct{} // holds a token when a post may be waiting
}

func newRpSem() *rpSem { return &rpSem{wake: make(chan struct{}, 1)} }

func (s *rpSem) post() {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wait takes one post; it reports false when ctx ended first.
func (s *rpSem) wait(ctx context.Context) bool {
	for {
		s.mu.Lock()
		if s.n > 0 {
			s.n--
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			return false
		}
	}
}
