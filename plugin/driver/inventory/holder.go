package inventory

import (
	"sync"
	"sync/atomic"
)

// Holder holds the current Snapshot. Load never blocks: it is one atomic
// read, whatever a scan or a prepare is doing. Store replaces the snapshot
// whole; the scanning goroutine is its one caller once the plugin serves.
type Holder struct {
	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex    // guards next, never held across anything else
	nxt chan struct{} // closed by the next Store
}

// NewHolder holds Empty until the first Store.
func NewHolder() *Holder {
	h := &Holder{nxt: make(chan struct{})}
	h.cur.Store(Empty())
	return h
}

// Load is the current snapshot, never nil. The caller must not change it.
func (h *Holder) Load() *Snapshot { return h.cur.Load() }

// Store makes s the current snapshot and wakes those waiting on Next.
func (h *Holder) Store(s *Snapshot) {
	h.cur.Store(s)
	h.mu.Lock()
	close(h.nxt)
	h.nxt = make(chan struct{})
	h.mu.Unlock()
}

// Next is closed when a snapshot is stored after this call.
func (h *Holder) Next() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nxt
}
