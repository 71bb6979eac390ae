package doctor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// netlinkNetnsMode asks RDMA netlink for the netns mode
// (RDMA_NLDEV_CMD_SYS_GET, as "rdma system show" does).
func netlinkNetnsMode() (bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return false, fmt.Errorf("RDMA netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, err
	}
	msg := make([]byte, unix.NLMSG_HDRLEN)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], uint16(abi.RDMA_NL_NLDEV<<10+abi.RDMA_NLDEV_CMD_SYS_GET))
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, err
	}
	var (
		mode  = -1
		acked bool
	)
	for !acked {
		buf := make([]byte, 1<<16)
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return false, err
		}
		m, done, err := parseSysGetReply(buf[:n])
		if err != nil {
			return false, err
		}
		if m >= 0 {
			mode = m
		}
		acked = done
	}
	if mode < 0 {
		return false, errors.New("the kernel's answer has no netns mode")
	}
	return mode == 1, nil
}

// parseSysGetReply reads one datagram of the answer to SYS_GET: the netns
// mode (-1 if the datagram has none) and whether the ACK has come.
func parseSysGetReply(b []byte) (mode int, done bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return -1, false, err
	}
	mode = -1
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR {
			if len(m.Data) < 4 {
				return -1, false, errors.New("short netlink error")
			}
			if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
				return -1, false, fmt.Errorf("RDMA_NLDEV_CMD_SYS_GET: %w", unix.Errno(-e))
			}
			done = true
			continue
		}
		if m.Header.Type == unix.NLMSG_DONE {
			done = true
			continue
		}
		attrs := m.Data
		for len(attrs) >= 4 {
			l := int(binary.NativeEndian.Uint16(attrs))
			t := binary.NativeEndian.Uint16(attrs[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
			if l < 4 || l > len(attrs) {
				return -1, false, errors.New("malformed netlink attribute")
			}
			if t == abi.RDMA_NLDEV_SYS_ATTR_NETNS_MODE && l >= 5 {
				mode = int(attrs[4])
			}
			attrs = attrs[min((l+3)&^3, len(attrs)):]
		}
	}
	return mode, done, nil
}
