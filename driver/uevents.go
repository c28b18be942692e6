package driver

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/efakit/efakit/host/uevent"
)

// The kernel says when a device comes, goes or changes driver (uevents):
// the plugin rescans within a second of it instead of at its next periodic
// scan, which stays as the safety net. A burst (a driver reload sends
// several events per EFA) makes one rescan: the first event starts a quiet
// period that each further event extends, up to a cap, so the rescan
// starts within ueventMaxWait of the first event even while events keep
// coming. The rescan goes through Run (askRescan), so it never
// runs beside a periodic one; it skips the owner check's API reads, which
// the hardware does not change. Port state (ACTIVE, DOWN) sends no uevent: it
// is polled with health.

const (
	// ueventQuiet is how long a burst must be quiet before the rescan.
	ueventQuiet = 200 * time.Millisecond
	// ueventMaxWait caps the wait after a burst's first event, leaving the
	// rest of the second to the scan and the publish.
	ueventMaxWait = 750 * time.Millisecond
)

// UeventSource delivers the kernel's uevents: a *uevent.Conn (Open) in the
// daemon, a fake in tests. Receive blocks until an event or an error (see
// uevent.Conn.Receive: uevent.ErrLost and uevent.ErrMalformed are not the
// end); Close ends a Receive that waits.
type UeventSource interface {
	Receive() (uevent.Event, error)
	Close() error
}

// KernelUevents opens the kernel's uevent socket (ServeOptions.Uevents in
// the daemon).
func KernelUevents() (UeventSource, error) {
	c, err := uevent.Open()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// relevantUevent tells whether an event may change what the plugin
// publishes: a PCI function (an EFA, or an accelerator the EFAs are
// attributed to) or an RDMA or uverbs device added, removed, changed,
// renamed or bound to a driver or unbound. A driver reload is seen as such
// (unbind, bind with DRIVER=efa, infiniband remove and add), so the module
// events add nothing. Network interfaces' events are left out: in the
// pod's own network namespace the host's never arrive; an ENA's rename is
// found by the periodic rescan.
func relevantUevent(ev uevent.Event) bool {
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

// ueventBurst is what a rescan was asked for: the events since the last.
type ueventBurst struct {
	count   int
	first   uevent.Event // the first relevant event; empty when only lost
	lost    bool         // the kernel dropped events (uevent.ErrLost)
	started time.Time
}

// WatchUevents rescans (through Run) after the relevant events src
// delivers, until ctx ends or src fails; it closes src. Events were lost
// (the socket's buffer overflowed) counts as an event.
func (p *Plugin) WatchUevents(ctx context.Context, src UeventSource) {
	logger := klog.FromContext(ctx)
	watchUevents(ctx, src, ueventQuiet, ueventMaxWait, func(b ueventBurst) {
		logger.V(2).Info("devices changed: rescanning", "events", b.count, "firstAction", b.first.Action,
			"firstSubsystem", b.first.Subsystem, "firstDevPath", b.first.DevPath, "eventsLost", b.lost,
			"waited", time.Since(b.started).Round(time.Millisecond))
		p.askRescan(rescanUevent)
	})
}

// startUevents opens the uevent source (none when open is nil) and
// watches it; stop ends the watch and waits for it. A source that cannot
// be opened (no netlink in a sandbox, a seccomp profile) is logged once:
// the periodic rescans go on.
func (p *Plugin) startUevents(ctx context.Context, open func() (UeventSource, error)) (stop func()) {
	if open == nil {
		return func() {}
	}
	logger := klog.FromContext(ctx)
	src, err := open()
	if err != nil {
		logger.Error(err, "cannot watch the kernel's uevents: hardware changes are seen at the periodic rescans only")
		return func() {}
	}
	logger.V(2).Info("watching the kernel's uevents")
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.WatchUevents(ctx, src)
	}()
	return func() {
		cancel()
		<-done
	}
}

// received is one answer of UeventSource.Receive.
type received struct {
	ev  uevent.Event
	err error
}

// watchUevents calls rescan once per burst of relevant events (see the
// top of this file), quiet and maxWait apart, until ctx ends or src fails.
func watchUevents(ctx context.Context, src UeventSource, quiet, maxWait time.Duration, rescan func(ueventBurst)) {
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

	var burst ueventBurst
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			rescan(burst)
			burst = ueventBurst{}
			continue
		case r := <-in:
			switch {
			case errors.Is(r.err, uevent.ErrLost):
				burst.lost = true
			case errors.Is(r.err, uevent.ErrMalformed):
				logger.V(2).Info("skipping a uevent", "err", r.err)
				continue
			case r.err != nil:
				logger.Error(r.err, "watching the kernel's uevents stopped: hardware changes are seen at the periodic rescans only")
				return
			case !relevantUevent(r.ev):
				continue
			default:
				if burst.count == 0 {
					burst.first = r.ev
				}
				burst.count++
			}
		}
		now := time.Now()
		if burst.started.IsZero() {
			burst.started = now
		}
		// Quiet after the last event, but never past the cap.
		timer.Reset(min(quiet, burst.started.Add(maxWait).Sub(now)))
	}
}
