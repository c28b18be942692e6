package driver

import (
	"context"
	"time"

	"github.com/efakit/efakit/plugin/driver/uevents"
	"k8s.io/klog/v2"
)

// WatchUevents rescans (through Run) after the relevant events src
// delivers, until ctx ends or src fails; it closes src. Events were lost
// (the socket's buffer overflowed) counts as an event.
func (p *Plugin) WatchUevents(ctx context.Context, src uevents.Source) {
	logger := klog.FromContext(ctx)
	uevents.Watch(ctx, src, uevents.Quiet, uevents.MaxWait, func(b uevents.Burst) {
		logger.V(2).Info("Devices changed; rescanning", "events", b.Count, "firstAction", b.First.Action,
			"firstSubsystem", b.First.Subsystem, "firstDevPath", b.First.DevPath, "eventsLost", b.Lost,
			"waited", time.Since(b.Started).Round(time.Millisecond))
		p.askRescan(rescanUevent)
	})
}

// startUevents opens the uevent source (none when open is nil) and
// watches it; stop ends the watch and waits for it. A source that cannot
// be opened (no netlink in a sandbox, a seccomp profile) is logged once:
// the periodic rescans go on.
func (p *Plugin) startUevents(ctx context.Context, open func() (uevents.Source, error)) (stop func()) {
	if open == nil {
		return func() {}
	}
	logger := klog.FromContext(ctx)
	src, err := open()
	if err != nil {
		logger.Error(err, "Cannot watch the kernel's uevents", "then", "hardware changes are seen at the periodic rescans only")
		return func() {}
	}
	logger.V(2).Info("Watching the kernel's uevents")
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
