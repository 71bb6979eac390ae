package cm

// Fuzz targets for what the rdma_cm device and a peer send: events
// (struct rdma_ucm_event_resp, whose union carries the peer's private
// data, connection parameters or UD address), and the socket addresses
// the kernel reports. Private data comes from the remote side: any bytes
// must give a value or an error, never a panic.

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// eventBytes returns the wire image of an event.
func eventBytes(r abi.RdmaUcmEventResp) []byte {
	return append([]byte(nil), bytesOf(&r)...)
}

// FuzzEvent hands the kernel's event, as the fuzzer writes it, to an event
// channel holding a connected-mode ID and a UD ID, through GET_EVENT and
// the channel's processing. target picks the ID the event names: 0 leaves
// uid and handle as the fuzzer wrote them, 1 the RC ID, 2 the UD ID.
func FuzzEvent(f *testing.F) {
	conn := abi.RdmaUcmEventResp{Event: uint32(EventConnectResponse)}
	cp := connParamOf(&conn)
	cp.Qp_num, cp.Responder_resources, cp.Initiator_depth, cp.Private_data_len = 0x11, 4, 4, 5
	copy(cp.Private_data[:], "hello")
	f.Add(eventBytes(conn), uint8(1))
	est := abi.RdmaUcmEventResp{Event: uint32(EventEstablished)}
	ud := udParamOf(&est)
	ud.Qp_num, ud.Qkey, ud.Ah_attr.Is_global, ud.Ah_attr.Port_num, ud.Private_data_len = 42, UDPQKey, 1, 1, 2
	ud.Ah_attr.Grh.Dgid[15] = 9
	copy(ud.Private_data[:], "ok")
	f.Add(eventBytes(est), uint8(2))
	for _, t := range []EventType{EventAddrResolved, EventRouteResolved, EventConnectRequest, EventRejected,
		EventDisconnected, EventUnreachable, EventMulticastJoin, EventTimewaitExit, 99} {
		f.Add(eventBytes(abi.RdmaUcmEventResp{Event: uint32(t), Status: uint32(0xffffff92)}), uint8(1))
	}
	f.Add(eventBytes(abi.RdmaUcmEventResp{Event: uint32(EventConnectRequest), Id: 4242}), uint8(0))
	f.Add(eventBytes(abi.RdmaUcmEventResp{Event: uint32(EventEstablished), Id: 4242}), uint8(0))
	f.Add([]byte{1, 2, 3}, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, target uint8) {
		k := newFakeKernel(t)
		ch, file := k.channelFile()
		rc, err := CreateID(ch, nil, PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		ud, err := CreateID(ch, nil, PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		var r abi.RdmaUcmEventResp
		copy(bytesOf(&r), b)
		switch target % 3 {
		case 1:
			r.Uid, r.Id = rc.uid, rc.handle
		case 2:
			r.Uid, r.Id = ud.uid, ud.handle
		}
		file.queue(r)
		// A sentinel behind it, so that a dropped event does not leave
		// GetEvent waiting.
		file.queue(event(ud, EventTimewaitExit, 0))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ev, err := ch.GetEvent(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID == nil {
				t.Fatalf("event %v without an ID", ev)
			}
			_, _ = ev.String(), ev.Err()
			if pd := ev.PrivateData(); len(pd) > MaxPrivateData {
				t.Fatalf("%d bytes of private data", len(pd))
			}
			ev.Ack()
			if ev.ListenID != nil && ev.ID != rc && ev.ID != ud {
				ev.ID.destroy() // the ID a connection request made
			}
			if ev.ID == ud && ev.Type == EventTimewaitExit && ev.Status == 0 {
				break
			}
		}
		rc.destroy()
		ud.destroy()
		ch.Close()
	})
}

// FuzzEventParams decodes the union of an event as both of its readings,
// the connection parameters and the UD parameters: the private data is
// what private_data_len says, bounded by the array.
func FuzzEventParams(f *testing.F) {
	var r abi.RdmaUcmEventResp
	cp := connParamOf(&r)
	cp.Qp_num, cp.Private_data_len = 0x11, 5
	copy(cp.Private_data[:], "hello")
	f.Add(r.Param[:])
	ud := udParamOf(&r)
	ud.Qkey, ud.Private_data_len = UDPQKey, 255
	f.Add(r.Param[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r abi.RdmaUcmEventResp
		copy(r.Param[:], b)
		var c ConnParam
		src := connParamOf(&r)
		copyConn(&c, src)
		if want := src.Private_data[:src.Private_data_len]; !bytes.Equal(c.PrivateData, want) || (len(want) == 0) != (c.PrivateData == nil) {
			t.Fatalf("connection private data %q, want %q", c.PrivateData, want)
		}
		if c.QPNum != src.Qp_num || c.SRQ != (src.Srq != 0) || c.ResponderResources != src.Responder_resources ||
			c.InitiatorDepth != src.Initiator_depth || c.RetryCount != src.Retry_count || c.RNRRetryCount != src.Rnr_retry_count {
			t.Fatalf("connection parameters %+v from %+v", c, src)
		}
		var u UDParam
		usrc := udParamOf(&r)
		copyUD(&u, usrc)
		if want := usrc.Private_data[:usrc.Private_data_len]; !bytes.Equal(u.PrivateData, want) {
			t.Fatalf("UD private data %q, want %q", u.PrivateData, want)
		}
		if u.QPNum != usrc.Qp_num || u.QKey != usrc.Qkey {
			t.Fatalf("UD parameters %+v from %+v", u, usrc)
		}
	})
}

// FuzzConnPrivateData sends private data and connection parameters as
// Connect and Accept encode them and decodes them as the peer's event
// does: what goes out comes back.
func FuzzConnPrivateData(f *testing.F) {
	f.Add([]byte("hello"), []byte(nil), uint8(1), uint8(7), uint8(7), uint32(0x11), true)
	f.Add(bytes.Repeat([]byte{0xa5}, MaxConnectPrivateData), []byte("AI:"), uint8(0), uint8(3), uint8(7), uint32(0xffffff), false)
	f.Add([]byte{}, []byte{}, uint8(0), uint8(0), uint8(0), uint32(0), false)
	f.Fuzz(func(t *testing.T, data, prefix []byte, flow, retry, rnr uint8, qpn uint32, srq bool) {
		// private_data_len is a u8: 255 bytes is the most that can be
		// described, whatever RDMA_MAX_PRIVATE_DATA says.
		if len(prefix)+len(data) > 255 {
			return
		}
		id := &ID{respRes: 4, initiatorDepth: 8}
		if len(prefix) > 0 {
			id.connectData = prefix
		}
		src := &ConnParam{PrivateData: data, FlowControl: flow, RetryCount: retry, RNRRetryCount: rnr}
		var k abi.RdmaUcmConnParam
		if err := id.connParamToKern("connect", &k, src, qpn, srq); err != nil {
			t.Fatal(err)
		}
		var got ConnParam
		copyConn(&got, &k)
		want := append(append([]byte(nil), prefix...), data...)
		if !bytes.Equal(got.PrivateData, want) {
			t.Fatalf("private data %q, want %q", got.PrivateData, want)
		}
		if got.QPNum != qpn || got.SRQ != srq || got.FlowControl != flow || got.RetryCount != retry ||
			got.RNRRetryCount != rnr || got.ResponderResources != 4 || got.InitiatorDepth != 8 {
			t.Fatalf("parameters %+v", got)
		}
	})
}

// FuzzSockaddr decodes the struct sockaddr_in and sockaddr_in6 the
// kernel reports (QUERY_ADDR, QUERY_ROUTE): anything else is the zero
// address, and an address re-encodes to what it decoded from.
func FuzzSockaddr(f *testing.F) {
	for _, a := range []string{"10.0.2.15:7174", "[fe80::1]:0", "[2001:db8::5]:65535", "[::ffff:10.0.2.15]:1"} {
		b := make([]byte, 128)
		n, err := putSockaddr(b, netip.MustParseAddrPort(a))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:n])
	}
	ib := make([]byte, 48)
	binary.NativeEndian.PutUint16(ib, 27) // AF_IB
	f.Add(ib)
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		a := sockaddr(b)
		if !a.IsValid() {
			return
		}
		out := make([]byte, 128)
		n, err := putSockaddr(out, a)
		if err != nil {
			t.Fatalf("putSockaddr(%v): %v", a, err)
		}
		got := sockaddr(out[:n])
		if a.Addr().Is4In6() {
			// An IPv4-mapped address goes out as the IPv4 address.
			if want := netip.AddrPortFrom(a.Addr().Unmap(), a.Port()); got != want {
				t.Fatalf("sockaddr(putSockaddr(%v)) = %v, want %v", a, got, want)
			}
			return
		}
		if got != a {
			t.Fatalf("sockaddr(putSockaddr(%v)) = %v", a, got)
		}
		// Family, port and address as the kernel wrote them.
		if !bytes.Equal(out[:4], b[:4]) {
			t.Fatalf("family and port % x, want % x", out[:4], b[:4])
		}
		switch binary.NativeEndian.Uint16(b) {
		case unix.AF_INET:
			if !bytes.Equal(out[4:8], b[4:8]) {
				t.Fatalf("address % x, want % x", out[4:8], b[4:8])
			}
		case unix.AF_INET6:
			if !bytes.Equal(out[8:24], b[8:24]) {
				t.Fatalf("address % x, want % x", out[8:24], b[8:24])
			}
		}
	})
}
