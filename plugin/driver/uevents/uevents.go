// Package uevents watches the kernel's uevents for the plugin: the
// changes of PCI functions and RDMA devices, one rescan per burst.
package uevents

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/efakit/efakit/internal/uevent"
)

// The kernel says when a device comes, goes or changes driver (uevents):
// the plugin rescans within a second of it instead of at its next periodic
// scan, which stays as the safety net. A burst (a driver reload sends
// several events per EFA) makes one rescan: the first event starts a quiet
// period that each further event extends, up to a cap, so the rescan
// starts within MaxWait of the first event even while events keep
// coming. The plugin's rescan goes through its run loop, so it never
// runs beside a periodic one; it skips the owner check's API reads, which
// the hardware does not change. Port state (ACTIVE, DOWN) sends no uevent: it
// is polled with health.

const (
	// Quiet is how long a burst must be quiet before the rescan.
	Quiet = 200 * time.Millisecond
	// MaxWait caps the wait after a burst's first event, leaving the
	// rest of the second to the scan and the publish.
	MaxWait = 750 * time.Millisecond
)

// Source delivers the kernel's uevents: a *uevent.Conn (Open) in the
// daemon, a fake in tests. Receive blocks until an event or an error (see
// uevent.Conn.Receive: uevent.ErrLost and uevent.ErrMalformed are not the
// end); Close ends a Receive that waits.
type Source interface {
	Receive() (uevent.Event, error)
	Close() error
}

// Kernel opens the kernel's uevent socket (driver.ServeOptions.Uevents in
// the daemon).
func Kernel() (Source, error) {
	c, err := uevent.Open()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// relevant tells whether an event may change what the plugin
// publishes: a PCI function (an EFA, or an accelerator the EFAs are
// attributed to) or an RDMA or uverbs device added, removed, changed,
// renamed or bound to a driver or unbound. A driver reload is seen as such
// (unbind, bind with DRIVER=efa, infiniband remove and add), so the module
// events add nothing. Network interfaces' events are left out: in the
// pod's own network namespace the host's never arrive; an ENA's rename is
// found by the periodic rescan.
func relevant(ev uevent.Event) bool {
	switch ev.Subsystem {
	case "pci", "infiniband", "infiniband_verbs":
	default:
		return false
	}
	switch ev.Action {
	case "add", "remove", "change", "bind", "unbind", "move":
		return true
	}
	return false
}

// Burst is what a rescan was asked for: the events since the last.
type Burst struct {
	Count   int
	First   uevent.Event // the first relevant event; empty when only lost
	Lost    bool         // the kernel dropped events (uevent.ErrLost)
	Started time.Time
}

// received is one answer of Source.Receive.
type received struct {
	ev  uevent.Event
	err error
}

// Watch calls rescan once per burst of relevant events (see the
// top of this file), quiet and maxWait apart, until ctx ends or src fails.
func Watch(ctx context.Context, src Source, quiet, maxWait time.Duration, rescan func(Burst)) {
	logger := klog.FromContext(ctx)
	in := make(chan received)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			ev, err := src.Receive()
			select {
			case in <- received{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !errors.Is(err, uevent.ErrLost) && !errors.Is(err, uevent.ErrMalformed) {
				return
			}
		}
	}()
	defer func() {
		_ = src.Close() // wakes the reader
		<-readerDone
	}()

	var burst Burst
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			rescan(burst)
			burst = Burst{}
			continue
		case r := <-in:
			switch {
			case errors.Is(r.err, uevent.ErrLost):
				burst.Lost = true
			case errors.Is(r.err, uevent.ErrMalformed):
				logger.V(2).Info("Skipping a uevent", "err", r.err)
				continue
			case r.err != nil:
				logger.Error(r.err, "Watching the kernel's uevents stopped", "then", "hardware changes are seen at the periodic rescans only")
				return
			case !relevant(r.ev):
				continue
			default:
				if burst.Count == 0 {
					burst.First = r.ev
				}
				burst.Count++
			}
		}
		now := time.Now()
		if burst.Started.IsZero() {
			burst.Started = now
		}
		// Quiet after the last event, but never past the cap.
		timer.Reset(min(quiet, burst.Started.Add(maxWait).Sub(now)))
	}
}
