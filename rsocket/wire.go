package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The rsocket wire protocol, as librdmacm's rsocket.c speaks it (its
// docs/rsocket describes it). Everything a connection says after the
// rdma_cm handshake is a 32-bit message carried as the immediate data of an
// RDMA write: the write moves the payload, if any, into the peer's memory,
// and the message tells the peer what it was. The top three bits are the
// message's type, the other 29 its argument.
const (
	opData     = 0 // application data: the argument is its length
	opWrite    = 2 // a direct write into an iomapped buffer; never sent as a message
	opSGL      = 4 // credits: the argument is the sender's new receive limit
	opIOMapSGL = 6 // an iomap entry was updated: the argument is its index
	opCtrl     = 7 // control: the argument is one of the ctrl values

	ctrlDisconnect = 0
	ctrlKeepAlive  = 1 // sent by librdmacm as a plain write, never as a message
	ctrlShutdown   = 2
)

func msg(op, data uint32) uint32 { return op<<29 | data }
func msgOp(m uint32) uint32      { return m >> 29 }
func msgData(m uint32) uint32    { return m & (1<<29 - 1) }

// Sizes and limits of librdmacm's implementation, which the peer assumes.
const (
	maxTransfer = 65536 // the largest write one message carries
	sndLowat    = 2048  // a send waits until this much send buffer is free
	olapStart   = 2048  // the first write of a large Write; doubled up to maxTransfer
	qpMinSize   = 16
	qpMaxSize   = 0xFFFE
	ctrlSlots   = 4 // control messages in flight at once (RS_QP_CTRL_SIZE)
	sglSize     = 2 // entries in a target SGL (RS_SGL_SIZE)
	sgeLen      = 16
	connDataLen = 40

	connVersion = 1
	flagNet     = 1 << 0 // the sender is big-endian: its SGL entries are
	flagIOMap   = 1 << 1 // the sender has an iomap after its target SGL
)

// rsSGE is struct rs_sge: memory of the peer's that this side may write.
type rsSGE struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// connData is struct rs_conn_data, the private data of the rdma_cm connect
// request and reply, all big-endian: the sender's initial receive credits,
// where its target SGL is (for this side's credit updates), and the first
// receive buffer this side may write data into.
type connData struct {
	Version   uint8
	Flags     uint8
	Credits   uint16
	IOMapSize uint8 // scaled, as rs_value_to_scale encodes it
	TargetSGL rsSGE // Length: the number of entries
	DataBuf   rsSGE
}

func (c *connData) marshal() [connDataLen]byte {
	var b [connDataLen]byte
	b[0], b[1] = c.Version, c.Flags
	binary.BigEndian.PutUint16(b[2:], c.Credits)
	// b[4:7] reserved
	b[7] = c.IOMapSize
	putSGE(b[8:], c.TargetSGL)
	putSGE(b[24:], c.DataBuf)
	return b
}

func putSGE(b []byte, s rsSGE) {
	binary.BigEndian.PutUint64(b, s.Addr)
	binary.BigEndian.PutUint32(b[8:], s.Key)
	binary.BigEndian.PutUint32(b[12:], s.Length)
}

func getSGE(b []byte) rsSGE {
	return rsSGE{
		Addr:   binary.BigEndian.Uint64(b),
		Key:    binary.BigEndian.Uint32(b[8:]),
		Length: binary.BigEndian.Uint32(b[12:]),
	}
}

// ErrProtocol is what a connection fails with when its peer broke the
// rsocket protocol: a message of an unknown type, data beyond what was
// granted, more messages than credits, private data of another version.
// Read and Write return it, wrapped (errors.Is matches it), until Close;
// the peer learns of the end when Close disconnects.
var ErrProtocol = errors.New("rsocket: protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// maxTargetSGL bounds the target SGL a peer may announce. librdmacm's has
// two entries; more would only be the peer's business (credit updates are
// written into its memory), but a length that makes the index arithmetic
// overflow would be ours.
const maxTargetSGL = 1 << 16

// parseConnData decodes and checks the peer's private data.
func parseConnData(b []byte) (connData, error) {
	if len(b) < connDataLen {
		return connData{}, protoErr("private data of %d bytes, want %d", len(b), connDataLen)
	}
	c := connData{
		Version:   b[0],
		Flags:     b[1],
		Credits:   binary.BigEndian.Uint16(b[2:]),
		IOMapSize: b[7],
		TargetSGL: getSGE(b[8:]),
		DataBuf:   getSGE(b[24:]),
	}
	switch {
	case c.Version != connVersion:
		return c, protoErr("private data of version %d, want %d", c.Version, connVersion)
	case c.Credits == 0:
		return c, protoErr("no receive credits")
	case c.TargetSGL.Length == 0 || c.TargetSGL.Length > maxTargetSGL:
		return c, protoErr("a target SGL of %d entries", c.TargetSGL.Length)
	case c.TargetSGL.Addr+uint64(c.TargetSGL.Length)*sgeLen < c.TargetSGL.Addr:
		return c, protoErr("a target SGL that wraps the address space")
	case c.DataBuf.Length == 0 || c.DataBuf.Addr+uint64(c.DataBuf.Length) < c.DataBuf.Addr:
		return c, protoErr("a receive buffer of %d bytes at %#x", c.DataBuf.Length, c.DataBuf.Addr)
	}
	return c, nil
}
