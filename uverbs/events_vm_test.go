package uverbs_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

// TestDevicePortEvents takes the VM's netdev under rxe0 down and up again
// and expects the port error and port active events. It only runs under the
// VM runner, where the netdev is ours to toggle.
func TestDevicePortEvents(t *testing.T) {
	testenv.RequireDevice(t)
	if !testenv.InVM() {
		t.Skip("toggles the VM's dummy0; runs only under the VM runner")
	}
	ctx := rdmatest.Open(t)
	link := func(state string) {
		t.Helper()
		if out, err := exec.Command("/usr/bin/ip", "link", "set", "dummy0", state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set dummy0 %s: %v: %s", state, err, out)
		}
	}
	wait := func(want uverbs.EventType) {
		t.Helper()
		ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ev, err := ctx.GetAsyncEvent(ectx)
			if err != nil {
				t.Fatalf("waiting for %v: %v", want, err)
			}
			t.Logf("event: %v", ev)
			if ev.Type == want {
				if ev.Port != 1 {
					t.Errorf("%v names port %d, want 1", ev, ev.Port)
				}
				return
			}
		}
	}
	link("down")
	defer func() {
		link("up")
		// Leave the device as the other tests expect it: active, with its
		// IPv4 RoCE v2 GID back in the table.
		deadline := time.Now().Add(10 * time.Second)
		for {
			pa, err := ctx.QueryPort(1)
			if err == nil && pa.State == uverbs.PortActive {
				if gids, err := ctx.QueryGIDTable(); err == nil {
					for _, g := range gids {
						if g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
							return
						}
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("rxe0 did not come back: %+v %v", pa, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wait(uverbs.EventPortErr)
	if pa, err := ctx.QueryPort(1); err != nil || pa.State == uverbs.PortActive {
		t.Errorf("port after the link went down: %+v, %v", pa, err)
	}
	link("up")
	wait(uverbs.EventPortActive)
}
