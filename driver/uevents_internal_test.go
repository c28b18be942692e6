package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/host/uevent"
)

// FakeUevents is a UeventSource fed by Send (and the external tests).
type FakeUevents struct {
	in     chan received
	once   sync.Once
	closed chan struct{}
}

func NewFakeUevents() *FakeUevents {
	return &FakeUevents{in: make(chan received), closed: make(chan struct{})}
}

// Send hands Receive an event or an error; false once the source is closed.
func (f *FakeUevents) Send(ev uevent.Event, err error) bool {
	select {
	case f.in <- received{ev, err}:
		return true
	case <-f.closed:
		return false
	}
}

func (f *FakeUevents) Receive() (uevent.Event, error) {
	select {
	case r := <-f.in:
		return r.ev, r.err
	case <-f.closed:
		return uevent.Event{}, uevent.ErrClosed
	}
}

func (f *FakeUevents) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// IsClosed tells whether Close was called.
func (f *FakeUevents) IsClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

func pciEvent(action string) uevent.Event {
	return uevent.Event{Action: action, DevPath: "/devices/pci0000:00/0000:00:06.0", Subsystem: "pci"}
}

// watching runs watchUevents with the daemon's timings on a fake source,
// recording when it asks for a rescan; stop ends it and returns the
// rescans.
func watching(t *testing.T) (src *FakeUevents, start time.Time, stop func() []ueventBurst) {
	src = NewFakeUevents()
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var bursts []ueventBurst
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchUevents(ctx, src, ueventQuiet, ueventMaxWait, func(b ueventBurst) {
			mu.Lock()
			defer mu.Unlock()
			b.started = time.Now() // when the rescan was asked for
			bursts = append(bursts, b)
		})
	}()
	return src, time.Now(), func() []ueventBurst {
		cancel()
		<-done
		assert.True(t, src.IsClosed(), "source not closed")
		mu.Lock()
		defer mu.Unlock()
		return bursts
	}
}

// TestUeventBurstOneRescan: events closer than the quiet period make one
// rescan, a quiet period after the last of them.
func TestUeventBurstOneRescan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, start, stop := watching(t)
		for i := range 10 {
			require.True(t, src.Send(pciEvent([]string{"unbind", "bind"}[i%2]), nil))
			time.Sleep(50 * time.Millisecond)
		}
		last := time.Now().Add(-50 * time.Millisecond)
		time.Sleep(5 * time.Second)
		bursts := stop()
		require.Len(t, bursts, 1)
		assert.Equal(t, 10, bursts[0].count)
		assert.Equal(t, "unbind", bursts[0].first.Action)
		assert.Equal(t, last.Add(ueventQuiet), bursts[0].started)
		assert.Less(t, bursts[0].started.Sub(start), time.Second)
	})
}

// TestUeventCap: events every 100 ms for 3 s are never quiet for 200 ms,
// yet every event is followed by a rescan within a second, and the
// rescans are far fewer than the events.
func TestUeventCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, stop := watching(t)
		var sent []time.Time
		for range 30 {
			sent = append(sent, time.Now())
			require.True(t, src.Send(pciEvent("change"), nil))
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		bursts := stop()
		for _, at := range sent {
			i := 0
			for i < len(bursts) && bursts[i].started.Before(at) {
				i++
			}
			require.Less(t, i, len(bursts), "no rescan after the event at %v", at)
			assert.LessOrEqual(t, bursts[i].started.Sub(at), time.Second, "event at %v", at)
		}
		assert.GreaterOrEqual(t, len(bursts), 3)
		assert.LessOrEqual(t, len(bursts), 5)
		n := 0
		for _, b := range bursts {
			n += b.count
		}
		assert.Equal(t, 30, n)
	})
}

// TestUeventIrrelevant: events of other subsystems, other actions and
// malformed messages make no rescan, and the watch goes on.
func TestUeventIrrelevant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, stop := watching(t)
		for _, ev := range []uevent.Event{
			{Action: "add", DevPath: "/devices/virtual/block/loop0", Subsystem: "block"},
			{Action: "add", DevPath: "/devices/virtual/net/veth1", Subsystem: "net"},
			{Action: "offline", DevPath: "/devices/system/cpu/cpu3", Subsystem: "cpu"},
			{Action: "add", DevPath: "/module/efa", Subsystem: "module"},
			{Action: "online", DevPath: "/devices/pci0000:00/0000:00:06.0", Subsystem: "pci"},
		} {
			require.True(t, src.Send(ev, nil))
		}
		require.True(t, src.Send(uevent.Event{}, uevent.ErrMalformed))
		time.Sleep(5 * time.Second)
		require.True(t, src.Send(uevent.Event{Action: "add", DevPath: "/devices/virtual/infiniband_verbs/uverbs3", Subsystem: "infiniband_verbs"}, nil))
		time.Sleep(5 * time.Second)
		bursts := stop()
		require.Len(t, bursts, 1, "only the infiniband_verbs event rescans")
		assert.Equal(t, "infiniband_verbs", bursts[0].first.Subsystem)
	})
}

// TestUeventLost: lost events (the socket's buffer overflowed) make a
// rescan, and the watch goes on.
func TestUeventLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, stop := watching(t)
		require.True(t, src.Send(uevent.Event{}, uevent.ErrLost))
		time.Sleep(5 * time.Second)
		require.True(t, src.Send(pciEvent("add"), nil))
		time.Sleep(5 * time.Second)
		bursts := stop()
		require.Len(t, bursts, 2)
		assert.True(t, bursts[0].lost)
		assert.Zero(t, bursts[0].count)
		assert.False(t, bursts[1].lost)
	})
}

// TestUeventSourceFails: any other error ends the watch, closing the
// source; the periodic rescans go on without it.
func TestUeventSourceFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := NewFakeUevents()
		done := make(chan struct{})
		go func() {
			defer close(done)
			watchUevents(t.Context(), src, ueventQuiet, ueventMaxWait, func(ueventBurst) { t.Error("rescan") })
		}()
		require.True(t, src.Send(uevent.Event{}, errors.New("reading uevents: bad file descriptor")))
		<-done
		assert.True(t, src.IsClosed())
	})
}

// TestStartUeventsOpenFails: a source that cannot be opened leaves the
// plugin without a watch, and stop returns at once.
func TestStartUeventsOpenFails(t *testing.T) {
	p := &Plugin{rescans: newRescans()}
	p.startUevents(t.Context(), func() (UeventSource, error) { return nil, errors.New("permission denied") })()
	p.startUevents(t.Context(), nil)()
	select {
	case <-p.rescans.ready:
		t.Fatal("a rescan asked for without a source")
	default:
	}
}

// TestKernelUeventKicks: with the kernel's socket, a uevent of a PCI
// function (written to its uevent file, as root) asks Run for a rescan
// within a second.
func TestKernelUeventKicks(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("/sys/bus/pci/devices/*/uevent")
	if len(files) == 0 || os.Geteuid() != 0 {
		t.Skip("needs root and a PCI function in /sys to send a uevent")
	}
	p := &Plugin{rescans: newRescans()}
	stop := p.startUevents(t.Context(), KernelUevents)
	defer stop()
	if err := os.WriteFile(files[0], []byte("change"), 0); err != nil {
		t.Skipf("cannot send a uevent through %s: %v", files[0], err)
	}
	select {
	case <-p.rescans.ready:
		assert.Equal(t, []rescanReason{rescanUevent}, p.rescans.take(), "a uevent's scan reads sysfs only")
	case <-time.After(time.Second):
		t.Fatal("no rescan within a second of a PCI uevent")
	}
}
