package valkeyrdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The control messages of Valkey's RDMA transport (src/rdma.c,
// ValkeyRdmaCmd): 32 bytes each, sent with IBV_WR_SEND into one of the
// peer's posted receives, every field big endian.
//
//	offset  GetServerFeature / SetClientFeature  Keepalive  RegisterXferMemory
//	0       opcode (2)                           opcode     opcode
//	2       select (2)                           reserved   reserved
//	16                                                      addr (8)
//	24      features (8)                                    length (4)
//	28                                                      key (4)
const msgSize = 32

// Opcodes (ValkeyRdmaOpcode).
const (
	opGetServerFeature   = 0
	opSetClientFeature   = 1
	opKeepalive          = 2
	opRegisterXferMemory = 3
)

// Buffer sizes Valkey accepts for the receive buffer a side registers
// (VALKEY_RDMA_MIN_RX_SIZE, _DEFAULT_RX_SIZE, _MAX_RX_SIZE).
const (
	MinBuffer     = 64 << 10
	DefaultBuffer = 1 << 20
	MaxBuffer     = 16 << 20
)

// message is one control message, decoded.
type message struct {
	op       uint16
	sel      uint16 // feature messages: the features asked about
	features uint64 // feature messages
	addr     uint64 // RegisterXferMemory: the receive buffer's address,
	length   uint32 // its length,
	key      uint32 // and its rkey
}

// marshal encodes m into b, which has msgSize bytes.
func (m *message) marshal(b []byte) {
	b = b[:msgSize]
	clear(b)
	binary.BigEndian.PutUint16(b[0:], m.op)
	switch m.op {
	case opGetServerFeature, opSetClientFeature:
		binary.BigEndian.PutUint16(b[2:], m.sel)
		binary.BigEndian.PutUint64(b[24:], m.features)
	case opRegisterXferMemory:
		binary.BigEndian.PutUint64(b[16:], m.addr)
		binary.BigEndian.PutUint32(b[24:], m.length)
		binary.BigEndian.PutUint32(b[28:], m.key)
	}
}

// ErrProtocol is matched (errors.Is) by the error that ends a connection
// whose peer broke Valkey's RDMA protocol: a control message of the wrong
// size or an unknown opcode, a receive buffer announced with a length
// outside 1 byte to MaxBuffer, or data announced past the end of this
// side's receive buffer.
var ErrProtocol = errors.New("valkeyrdma: protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// parseMessage decodes a received control message of n bytes and checks
// what this side relies on: its size, its opcode, and for
// RegisterXferMemory a length within 1 byte to MaxBuffer (src/rdma.c
// takes any; a length of 0 would leave nothing to write into, and a
// length past MaxBuffer would make this side register as much memory for
// its copy of what it sends).
func parseMessage(b []byte, n uint32) (message, error) {
	if n != msgSize || len(b) < msgSize {
		return message{}, protoErr("a control message of %d bytes, not %d", n, msgSize)
	}
	m := message{op: binary.BigEndian.Uint16(b[0:])}
	switch m.op {
	case opGetServerFeature, opSetClientFeature:
		m.sel = binary.BigEndian.Uint16(b[2:])
		m.features = binary.BigEndian.Uint64(b[24:])
	case opKeepalive:
	case opRegisterXferMemory:
		m.addr = binary.BigEndian.Uint64(b[16:])
		m.length = binary.BigEndian.Uint32(b[24:])
		m.key = binary.BigEndian.Uint32(b[28:])
		if m.length == 0 || m.length > MaxBuffer {
			return message{}, protoErr("a receive buffer of %d bytes announced (1 to %d)", m.length, MaxBuffer)
		}
	default:
		return message{}, protoErr("unknown opcode %d", m.op)
	}
	return m, nil
}
