package cmsock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/uverbs"
)

func TestResolveNetworks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		network, address string
		tcp, ok          bool
		want             string
	}{
		{"rdma", "10.0.0.1:7", false, true, "10.0.0.1:7"},
		{"rdma4", "10.0.0.1:7", false, true, "10.0.0.1:7"},
		{"rdma6", "[fe80::1]:7", false, true, "[fe80::1]:7"},
		{"tcp", "10.0.0.1:7", true, true, "10.0.0.1:7"},
		{"tcp6", "[::1]:7", true, true, "[::1]:7"},
		{"tcp", "10.0.0.1:7", false, false, ""},
		{"udp", "10.0.0.1:7", true, false, ""},
	} {
		ap, err := Resolve(ctx, tc.network, tc.address, false, tc.tcp)
		if tc.ok != (err == nil) || tc.ok && ap.String() != tc.want {
			t.Errorf("Resolve(%q, %q, tcp %v) = %v, %v", tc.network, tc.address, tc.tcp, ap, err)
		}
		var unknown net.UnknownNetworkError
		if !tc.ok && !errors.As(err, &unknown) {
			t.Errorf("Resolve(%q, tcp %v): %v, want an UnknownNetworkError", tc.network, tc.tcp, err)
		}
	}
}

func TestSysErr(t *testing.T) {
	keep := errors.New("protocol")
	var se *os.SyscallError
	if err := SysErr("bind", syscall.EADDRINUSE); !errors.As(err, &se) || se.Syscall != "bind" || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("errno: %#v", err)
	}
	for _, err := range []error{keep, uverbs.ErrNoDevice, errors.New("other")} {
		if got := SysErr("connect", err, keep); got != err {
			t.Errorf("SysErr(%v) = %v, want it unchanged", err, got)
		}
	}
	// A REJECTED connect: nobody listening reads as a socket's refusal;
	// the server program's reject names its reason, and matches too.
	rej := func(reason int) error {
		return &cm.Error{Op: "connect", Event: cm.EventRejected, Status: reason, HasEvent: true, Err: syscall.ECONNREFUSED}
	}
	if err := SysErr("connect", rej(8)); err.Error() != "connect: connection refused" || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("rejected, nobody listening: %v", err)
	}
	err := SysErr("connect", rej(28))
	if !errors.As(err, &se) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "reason 28") {
		t.Errorf("rejected by the server: %v", err)
	}
}

func TestOpErr(t *testing.T) {
	closed := errors.New("closed")
	if OpErr("read", "rdma", nil, nil, nil, closed) != nil || OpErr("read", "rdma", nil, nil, io.EOF, closed) != io.EOF {
		t.Error("nil or io.EOF wrapped")
	}
	err := OpErr("write", "rdma", nil, nil, closed, closed)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || !errors.Is(err, net.ErrClosed) {
		t.Errorf("closed: %#v", err)
	}
}

func TestDeadlines(t *testing.T) {
	var d Deadlines
	woken := make(chan struct{}, 10)
	wake := func() { woken <- struct{}{} }
	if d.Pending() {
		t.Fatal("Pending with no deadline set")
	}
	d.Set(0, time.Now().Add(20*time.Millisecond), wake)
	<-woken // Set wakes at once
	if d.Passed(0) || d.Passed(1) {
		t.Fatal("a deadline passed too soon")
	}
	if !d.Pending() {
		t.Error("a deadline yet to pass is not pending")
	}
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not wake")
	}
	if !d.Passed(0) {
		t.Error("the deadline has not passed after its timer fired")
	}
	if d.Pending() {
		t.Error("a deadline that passed is still pending")
	}
	d.Set(0, time.Time{}, wake)
	<-woken
	if d.Passed(0) {
		t.Error("the zero time left a deadline")
	}
	d.Set(1, time.Now().Add(-time.Second), wake)
	<-woken
	if !d.Passed(1) {
		t.Error("a deadline in the past has not passed")
	}
	if d.Pending() {
		t.Error("a deadline in the past is pending")
	}
	d.Set(2, time.Now().Add(time.Hour), wake)
	<-woken
	d.Set(0, time.Now().Add(time.Hour), wake)
	<-woken
	d.Set(2, time.Time{}, wake)
	<-woken
	if !d.Pending() {
		t.Error("direction 0's deadline is not pending after direction 2's was cleared")
	}
	d.Set(0, time.Time{}, wake)
	<-woken
	if d.Pending() {
		t.Error("Pending after every deadline was cleared")
	}
	// Moved later while its timer is due: the old time must not count.
	d.Set(1, time.Now().Add(5*time.Millisecond), wake)
	<-woken
	d.Set(1, time.Now().Add(time.Hour), wake)
	<-woken
	time.Sleep(50 * time.Millisecond)
	if d.Passed(1) {
		t.Error("a deadline moved an hour on passed at its old time")
	}
	select {
	case <-woken:
		t.Error("the old deadline's timer woke the waiter")
	default:
	}
	d.Stop()
}
