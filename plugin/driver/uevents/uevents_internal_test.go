package uevents

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/uevent"
)

func pciEvent(action string) uevent.Event {
	return uevent.Event{Action: action, DevPath: "/devices/pci0000:00/0000:00:06.0", Subsystem: "pci"}
}

// watching runs Watch with the daemon's timings on a fake source,
// recording when it asks for a rescan; stop ends it and returns the
// rescans.
func watching(t *testing.T) (src *Fake, start time.Time, stop func() []Burst) {
	src = NewFake()
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var bursts []Burst
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, src, Quiet, MaxWait, func(b Burst) {
			mu.Lock()
			defer mu.Unlock()
			b.Started = time.Now() // when the rescan was asked for
			bursts = append(bursts, b)
		})
	}()
	return src, time.Now(), func() []Burst {
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
		assert.Equal(t, 10, bursts[0].Count)
		assert.Equal(t, "unbind", bursts[0].First.Action)
		assert.Equal(t, last.Add(Quiet), bursts[0].Started)
		assert.Less(t, bursts[0].Started.Sub(start), time.Second)
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
			for i < len(bursts) && bursts[i].Started.Before(at) {
				i++
			}
			require.Less(t, i, len(bursts), "no rescan after the event at %v", at)
			assert.LessOrEqual(t, bursts[i].Started.Sub(at), time.Second, "event at %v", at)
		}
		assert.GreaterOrEqual(t, len(bursts), 3)
		assert.LessOrEqual(t, len(bursts), 5)
		n := 0
		for _, b := range bursts {
			n += b.Count
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
		assert.Equal(t, "infiniband_verbs", bursts[0].First.Subsystem)
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
		assert.True(t, bursts[0].Lost)
		assert.Zero(t, bursts[0].Count)
		assert.False(t, bursts[1].Lost)
	})
}

// TestUeventSourceFails: any other error ends the watch, closing the
// source; the periodic rescans go on without it.
func TestUeventSourceFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := NewFake()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Watch(t.Context(), src, Quiet, MaxWait, func(Burst) { t.Error("rescan") })
		}()
		require.True(t, src.Send(uevent.Event{}, errors.New("reading uevents: bad file descriptor")))
		<-done
		assert.True(t, src.IsClosed())
	})
}
