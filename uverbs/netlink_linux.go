package uverbs

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// RDMA netlink (NETLINK_RDMA, the nldev client) is how the kernel names its
// RDMA devices and, for each, the uverbs character device and the driver id
// that the ioctl header carries. Its messages are a netlink header followed
// directly by attributes; there is no generic-netlink header.

// dialNL opens RDMA netlink; tests replace it.
var dialNL = func() (nlConn, error) { return dialRDMANetlink() }

func netlinkDevices() ([]Device, error) {
	c, err := dialNL()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	nls, err := nlDevices(c)
	if err != nil {
		return nil, err
	}
	var devs []Device
	for _, n := range nls {
		if n.chardev == "" {
			continue // no verbs interface (e.g. a device without user access)
		}
		d := Device{
			Name:       n.name,
			Index:      n.index,
			NodeType:   NodeType(n.nodeType),
			DriverID:   n.driverID,
			DevPath:    filepath.Join(devRoot, n.chardev),
			ABIVersion: int(n.abiVer),
			SysfsPath:  filepath.Join(sysfsRoot, "class/infiniband", n.name),
		}
		// Netlink sends the GUID in host order of the big-endian value.
		binary.BigEndian.PutUint64(d.NodeGUID[:], n.nodeGUID)
		d.Driver = driverName(d.DriverID)
		d.Transport = transportOf(d.NodeType)
		devs = append(devs, d)
	}
	return devs, nil
}

// nlAttrs is a decoded attribute set: type to payload.
type nlAttrs map[uint16][]byte

func (a nlAttrs) u32(t uint16) (uint32, bool) {
	b, ok := a[t]
	if !ok || len(b) < 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(b), true
}

// uint returns an unsigned attribute sent as 1, 2, 4 or 8 bytes; the kernel
// has widened some of them over the years.
func (a nlAttrs) uint(t uint16) (uint64, bool) {
	b, ok := a[t]
	if !ok {
		return 0, false
	}
	ne := binary.NativeEndian
	switch len(b) {
	case 1:
		return uint64(b[0]), true
	case 2:
		return uint64(ne.Uint16(b)), true
	case 4:
		return uint64(ne.Uint32(b)), true
	case 8:
		return ne.Uint64(b), true
	}
	return 0, false
}

func (a nlAttrs) str(t uint16) (string, bool) {
	b, ok := a[t]
	if !ok {
		return "", false
	}
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	return string(b), true
}

// nlEncoder appends netlink attributes to a message.
type nlEncoder struct{ b []byte }

func (e *nlEncoder) attr(t uint16, payload []byte) {
	n := unix.SizeofRtAttr + len(payload)
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(n))
	binary.NativeEndian.PutUint16(h[2:], t)
	e.b = append(e.b, h[:]...)
	e.b = append(e.b, payload...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}

func (e *nlEncoder) u32(t uint16, v uint32) {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	e.attr(t, b[:])
}

func (e *nlEncoder) str(t uint16, s string) { e.attr(t, append([]byte(s), 0)) }

// parseNLAttrs decodes a flat attribute list, ignoring nesting.
func parseNLAttrs(b []byte) (nlAttrs, error) {
	attrs := nlAttrs{}
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b[0:]))
		t := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if n < 4 || n > len(b) {
			return nil, fmt.Errorf("uverbs: malformed netlink attribute (len %d of %d)", n, len(b))
		}
		attrs[t] = b[4:n]
		adv := (n + 3) &^ 3
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return attrs, nil
}

// nlConn is the transport: real sockets in production, a fake in tests.
type nlConn interface {
	// request sends one message and returns the attribute sets of every reply
	// message up to the end of a dump or the single answer.
	request(msgType uint16, flags uint16, attrs []byte) ([]nlAttrs, error)
	Close() error
}

var nlSeq atomic.Uint32

type nlSocket struct{ fd int }

func dialRDMANetlink() (*nlSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &nlSocket{fd: fd}, nil
}

func (s *nlSocket) Close() error { return unix.Close(s.fd) }

func (s *nlSocket) request(msgType, flags uint16, payload []byte) ([]nlAttrs, error) {
	seq := nlSeq.Add(1)
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(payload))
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+len(payload)))
	ne.PutUint16(msg[4:], msgType)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], seq)
	msg = append(msg, payload...)
	if err := unix.Sendto(s.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out []nlAttrs
	for {
		// A fresh buffer for every datagram: the attributes returned point
		// into it, and the next receive (often just the ACK) must not
		// overwrite them.
		buf := make([]byte, 1<<16)
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return nil, err
		}
		var done bool
		if out, done, err = nlReply(buf[:n], seq, flags, out); err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

// nlReply reads one datagram of the kernel's answer to request seq, sent
// with flags: it appends the attribute sets of the request's messages to
// out and reports whether the answer is complete (the end of a dump, or
// the ACK of a single request). Messages of other requests are skipped.
func nlReply(b []byte, seq uint32, flags uint16, out []nlAttrs) ([]nlAttrs, bool, error) {
	msgs, err := parseNLMessages(b)
	if err != nil {
		return nil, false, err
	}
	for _, m := range msgs {
		if m.seq != seq {
			continue
		}
		switch m.typ {
		case unix.NLMSG_DONE:
			return out, true, nil
		case unix.NLMSG_ERROR:
			if len(m.data) < 4 {
				return nil, false, unix.EIO
			}
			if errno := -int32(binary.NativeEndian.Uint32(m.data)); errno != 0 {
				return nil, false, unix.Errno(errno)
			}
			// An ACK ends a non-dump request.
			if flags&unix.NLM_F_DUMP == 0 {
				return out, true, nil
			}
		default:
			a, err := parseNLAttrs(m.data)
			if err != nil {
				return nil, false, err
			}
			out = append(out, a)
		}
	}
	return out, false, nil
}

type nlMsg struct {
	typ  uint16
	seq  uint32
	data []byte
}

func parseNLMessages(b []byte) ([]nlMsg, error) {
	var msgs []nlMsg
	ne := binary.NativeEndian
	for len(b) >= unix.NLMSG_HDRLEN {
		n := int(ne.Uint32(b[0:]))
		if n < unix.NLMSG_HDRLEN || n > len(b) {
			return nil, fmt.Errorf("uverbs: malformed netlink message (len %d of %d)", n, len(b))
		}
		msgs = append(msgs, nlMsg{typ: ne.Uint16(b[4:]), seq: ne.Uint32(b[8:]), data: b[unix.NLMSG_HDRLEN:n]})
		adv := (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return msgs, nil
}

func nldevType(op int) uint16 { return uint16(abi.RDMA_NL_NLDEV<<10 + op) }

// nlDevice is what netlink says of one device.
type nlDevice struct {
	index    uint32
	name     string
	nodeGUID uint64
	nodeType uint8
	chardev  string // "uverbs0"; "" if the device has no uverbs interface
	abiVer   uint64
	driverID uint32
}

// nlDevices lists the RDMA devices with their uverbs character devices.
func nlDevices(c nlConn) ([]nlDevice, error) {
	replies, err := c.request(nldevType(abi.RDMA_NLDEV_CMD_GET), unix.NLM_F_DUMP, nil)
	if err != nil {
		return nil, err
	}
	devs := make([]nlDevice, 0, len(replies))
	for _, a := range replies {
		var d nlDevice
		var ok bool
		if d.index, ok = a.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX); !ok {
			continue
		}
		d.name, _ = a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME)
		d.nodeGUID, _ = a.uint(abi.RDMA_NLDEV_ATTR_NODE_GUID)
		if t, ok := a.uint(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE); ok {
			d.nodeType = uint8(t)
		}
		var e nlEncoder
		e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, d.index)
		e.str(abi.RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs")
		cr, err := c.request(nldevType(abi.RDMA_NLDEV_CMD_GET_CHARDEV), 0, e.b)
		if err == nil && len(cr) > 0 {
			d.chardev, _ = cr[0].str(abi.RDMA_NLDEV_ATTR_CHARDEV_NAME)
			d.abiVer, _ = cr[0].uint(abi.RDMA_NLDEV_ATTR_CHARDEV_ABI)
			if id, ok := cr[0].uint(abi.RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID); ok {
				d.driverID = uint32(id)
			}
		}
		devs = append(devs, d)
	}
	return devs, nil
}
