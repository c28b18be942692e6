package uevents

import (
	"sync"

	"github.com/efakit/efakit/internal/uevent"
)

// Fake is a Source fed by Send: tests of what watches uevents use it in
// place of the kernel's socket.
type Fake struct {
	in     chan received
	once   sync.Once
	closed chan struct{}
}

// NewFake returns an open Fake.
func NewFake() *Fake {
	return &Fake{in: make(chan received), closed: make(chan struct{})}
}

// Send hands Receive an event or an error; false once the source is closed.
func (f *Fake) Send(ev uevent.Event, err error) bool {
	select {
	case f.in <- received{ev, err}:
		return true
	case <-f.closed:
		return false
	}
}

// Receive returns what Send hands it, or uevent.ErrClosed once closed.
func (f *Fake) Receive() (uevent.Event, error) {
	select {
	case r := <-f.in:
		return r.ev, r.err
	case <-f.closed:
		return uevent.Event{}, uevent.ErrClosed
	}
}

// Close ends a Receive that waits.
func (f *Fake) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// IsClosed tells whether Close was called.
func (f *Fake) IsClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}
