package cm

import (
	"sync"
	"weak"
)

// registry maps the uids the kernel echoes in events back to IDs and
// multicast groups, and kernel handles to IDs. It holds IDs by weak
// pointer, so that it does not keep a dropped ID reachable; an event for
// an ID already unreachable is dropped, as one for a destroyed ID.
var registry = struct {
	mu      sync.Mutex
	next    uint64
	ids     map[uint64]weak.Pointer[ID]
	handles map[uint32]weak.Pointer[ID]
	mcs     map[uint64]*multicast
}{ids: map[uint64]weak.Pointer[ID]{}, handles: map[uint32]weak.Pointer[ID]{}, mcs: map[uint64]*multicast{}}

func newUID() uint64 {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.next++
	return registry.next
}

func registerID(id *ID) {
	registry.mu.Lock()
	registry.ids[id.uid] = id.self
	registry.handles[id.handle] = id.self
	registry.mu.Unlock()
}

func unregisterID(r *idRes) {
	registry.mu.Lock()
	if registry.ids[r.uid] == r.self {
		delete(registry.ids, r.uid)
	}
	if registry.handles[r.handle] == r.self {
		delete(registry.handles, r.handle)
	}
	registry.mu.Unlock()
}

func lookupUID(uid uint64) *ID {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.ids[uid].Value()
}

func lookupHandle(h uint32) *ID {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.handles[h].Value()
}
