package wr

import (
	"encoding/binary"
	"fmt"
)

// Remote names memory of the peer's: the address and remote key its memory
// region advertises (ibv_mr's addr and rkey), which an RDMA read, write or
// atomic targets. A peer's uverbs.MR.Remote gives it; it travels to this
// side in whatever message the application exchanges.
type Remote struct {
	Addr uint64
	RKey uint32
}

// Add returns the memory n bytes further into the same region.
func (r Remote) Add(n uint64) Remote { return Remote{Addr: r.Addr + n, RKey: r.RKey} }

// RemoteLen is the length of a Remote's binary form.
const RemoteLen = 12

// AppendBinary appends the Remote's binary form to b: the address then the
// key, big endian (network order, as rping and perftest send theirs), 12
// bytes (encoding.BinaryAppender). Every program sends its Remote to the
// peer; this is a form both sides can agree on without a schema.
func (r Remote) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, r.Addr)
	return binary.BigEndian.AppendUint32(b, r.RKey), nil
}

// MarshalBinary returns the Remote's binary form (AppendBinary).
func (r Remote) MarshalBinary() ([]byte, error) { return r.AppendBinary(make([]byte, 0, RemoteLen)) }

// UnmarshalBinary sets r from its binary form, which must be exactly
// RemoteLen bytes.
func (r *Remote) UnmarshalBinary(b []byte) error {
	if len(b) != RemoteLen {
		return fmt.Errorf("wr: a Remote is %d bytes, not %d", RemoteLen, len(b))
	}
	r.Addr, r.RKey = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:])
	return nil
}
