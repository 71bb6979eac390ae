package rdmatool

import (
	"encoding/binary"
	"errors"

	"github.com/mdlayher/netlink"
)

// The RDMA netlink client. Its transport is github.com/mdlayher/netlink
// (see docs/architecture.md): dumps that span datagrams, sequence checks
// and error messages are its business; what is ours is the nldev message
// layout, a netlink header followed directly by attributes, with nested
// tables for resources and counters.

// transport sends one nldev request and returns the payloads (attributes)
// of the replies; tests replace it with recorded replies.
type transport interface {
	request(cmd uint16, flags netlink.HeaderFlags, attrs []byte) ([][]byte, error)
	Close() error
}

// nlTransport is the kernel's RDMA netlink.
type nlTransport struct{ c *netlink.Conn }

// dial opens RDMA netlink; tests replace it.
var dial = func() (transport, error) {
	c, err := netlink.Dial(netlinkRDMA, nil)
	if err != nil {
		return nil, err
	}
	return &nlTransport{c: c}, nil
}

func (t *nlTransport) Close() error { return t.c.Close() }

func (t *nlTransport) request(cmd uint16, flags netlink.HeaderFlags, attrs []byte) ([][]byte, error) {
	msgs, err := t.c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nldevType(cmd)), Flags: netlink.Request | flags},
		Data:   attrs,
	})
	if err != nil {
		return nil, unwrapOp(err)
	}
	var out [][]byte
	for _, m := range msgs {
		// An acknowledgement (an error message of errno 0) or the end of a
		// dump carries no attributes.
		if m.Header.Type == netlink.Error || m.Header.Type == netlink.Done {
			continue
		}
		out = append(out, m.Data)
	}
	return out, nil
}

// unwrapOp returns the errno of a netlink operation's error, which is what
// the C tool reports; other errors are returned as they are.
func unwrapOp(err error) error {
	var op *netlink.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// nldevType is the netlink message type of an nldev command.
func nldevType(cmd uint16) uint16 { return rdmaNLNLDev<<10 | cmd }

// attrs is one decoded attribute level: each type's payload (the last one,
// for a type sent twice) and the order the types came in.
type attrs struct {
	m     map[uint16][]byte
	order []uint16
	// nested holds the payloads of every attribute of nestedType at this
	// level, in order (the entries of a table).
	nested [][]byte
}

// decode parses an attribute list. A malformed list is an error; what it
// held before the fault is not used.
func decode(b []byte) (attrs, error) {
	a := attrs{m: map[uint16][]byte{}}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return attrs{}, err
	}
	ad.ByteOrder = binary.NativeEndian
	for ad.Next() {
		t := ad.Type()
		p := ad.Bytes()
		if _, dup := a.m[t]; !dup {
			a.order = append(a.order, t)
		}
		a.m[t] = p
		a.nested = append(a.nested, p)
	}
	if err := ad.Err(); err != nil {
		return attrs{}, err
	}
	return a, nil
}

// entries decodes the table in attribute t: each entry's attributes.
func (a attrs) entries(t uint16) ([]attrs, error) {
	b, ok := a.m[t]
	if !ok {
		return nil, nil
	}
	tbl, err := decode(b)
	if err != nil {
		return nil, err
	}
	out := make([]attrs, 0, len(tbl.nested))
	for _, e := range tbl.nested {
		ea, err := decode(e)
		if err != nil {
			return nil, err
		}
		out = append(out, ea)
	}
	return out, nil
}

func (a attrs) has(t uint16) bool { _, ok := a.m[t]; return ok }

// uint reads an unsigned attribute sent as 1, 2, 4 or 8 bytes: the kernel
// has widened some over the years, and the C tool reads each by its
// declared width, which the payload always has at least.
func (a attrs) uint(t uint16) uint64 {
	b := a.m[t]
	ne := binary.NativeEndian
	switch {
	case len(b) >= 8:
		return ne.Uint64(b)
	case len(b) >= 4:
		return uint64(ne.Uint32(b))
	case len(b) >= 2:
		return uint64(ne.Uint16(b))
	case len(b) == 1:
		return uint64(b[0])
	}
	return 0
}

// str reads a NUL-terminated string attribute.
func (a attrs) str(t uint16) string {
	b := a.m[t]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// encoder builds a request's attributes.
type encoder struct{ ae *netlink.AttributeEncoder }

func newEncoder() encoder {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.NativeEndian
	return encoder{ae}
}

func (e encoder) u32(t uint16, v uint32) { e.ae.Uint32(t, v) }
func (e encoder) u8(t uint16, v uint8)   { e.ae.Uint8(t, v) }
func (e encoder) str(t uint16, s string) { e.ae.String(t, s) }

// bytes is the encoded list; only a nested encoder's error (none is used)
// could fail it.
func (e encoder) bytes() ([]byte, error) { return e.ae.Encode() }
