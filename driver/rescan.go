package driver

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// rescanReason says why a scan is asked for. Every reason but a uevent also
// checks again for another owner of the EFAs (API reads whose answer does
// not depend on sysfs).
type rescanReason string

const (
	rescanInterval  rescanReason = "interval"   // the periodic scan
	rescanSignal    rescanReason = "signal"     // SIGHUP
	rescanUevent    rescanReason = "uevent"     // the kernel said a device changed: sysfs only
	rescanPrepare   rescanReason = "prepare"    // a prepare or a refresh saw sysfs differ from the last scan
	rescanAPI       rescanReason = "api-server" // the API server dropped fields of a publish
	rescanSlices    rescanReason = "slices"     // another dra.net publisher's slices changed
	rescanNode      rescanReason = "node"       // the Node's labels or device-plugin capacity changed
	rescanOwnerWait rescanReason = "owner-wait" // the owner check could not tell: ask again in 5-10 s
	rescanHealth    rescanReason = "health"     // the health check's interval: sysfs only
)

// recheck tells whether a scan for the reason checks for another owner.
func (r rescanReason) recheck() bool { return r != rescanUevent && r != rescanHealth }

// rescans are the scans asked for and not yet run: one request carries its
// reason, requests made while one waits join it, and Run takes them all at
// once.
type rescans struct {
	ready   chan struct{} // holds one token while reasons wait
	mu      sync.Mutex
	pending []rescanReason
	// later is a request for a scan at a time (askAfter), the earliest
	// one: Run's loop waits for it, so it needs no goroutine of its own.
	later   rescanReason
	laterAt time.Time
	// round is closed when the scan that serves the requests made now
	// ends; taken is the round of the scan under way.
	round, taken chan struct{}
}

func newRescans() *rescans {
	return &rescans{ready: make(chan struct{}, 1), round: make(chan struct{})}
}

// ask asks for a scan for reason; it never blocks.
func (q *rescans) ask(reason rescanReason) { q.askWait(reason) }

// askWait asks for a scan for reason and returns what is closed when that
// scan has ended; it never blocks.
func (q *rescans) askWait(reason rescanReason) <-chan struct{} {
	q.mu.Lock()
	if !slices.Contains(q.pending, reason) {
		q.pending = append(q.pending, reason)
	}
	round := q.round
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return round
}

// served says the scan of the requests last taken has ended.
func (q *rescans) served() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.taken != nil {
		close(q.taken)
		q.taken = nil
	}
}

// askAfter asks for a scan for reason in d (or sooner, when an earlier
// delayed request waits); it never blocks.
func (q *rescans) askAfter(d time.Duration, reason rescanReason) {
	at := time.Now().Add(d)
	q.mu.Lock()
	if q.laterAt.IsZero() || at.Before(q.laterAt) {
		q.later, q.laterAt = reason, at
	}
	q.mu.Unlock()
	// Wake Run, which takes nothing and waits for the new time.
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// next is when the delayed request is due (nil for none): Run selects on
// it, and then calls due.
func (q *rescans) next() <-chan time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.laterAt.IsZero() {
		return nil
	}
	return time.After(time.Until(q.laterAt))
}

// due turns the delayed request into a request now.
func (q *rescans) due() {
	q.mu.Lock()
	reason := q.later
	q.later, q.laterAt = "", time.Time{}
	q.mu.Unlock()
	if reason != "" {
		q.ask(reason)
	}
}

// take returns the reasons waiting, in the order first asked, and clears
// them.
func (q *rescans) take() []rescanReason {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	if q.taken == nil {
		q.taken, q.round = q.round, make(chan struct{})
	}
	return out
}

// anyRecheck tells whether one of the reasons checks for another owner.
func anyRecheck(rs []rescanReason) bool {
	return slices.ContainsFunc(rs, rescanReason.recheck)
}

// Run rescans every interval, whenever signal receives (SIGHUP), and
// whenever a scan is asked for (askRescan, the health checks), until ctx
// ends. It is the one goroutine that scans once the plugin serves: the
// inventory and health have one writer. Each scan
// checks again for another owner of the EFAs unless a uevent alone asked
// for it.
func (p *Plugin) Run(ctx context.Context, interval time.Duration, signal <-chan struct{}) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		var reasons []rescanReason
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			reasons = append(p.rescans.take(), rescanInterval)
		case <-signal:
			reasons = append(p.rescans.take(), rescanSignal)
		case <-p.rescans.next():
			p.rescans.due()
			continue
		case <-p.rescans.ready:
			reasons = p.rescans.take()
			if len(reasons) == 0 {
				p.rescans.served()
				continue
			}
		}
		logger.V(2).Info("Rescanning", "reasons", reasons)
		if anyRecheck(reasons) {
			p.Recheck(ctx)
		}
		// Publish logs what it changed; a scan's errors are logged here
		// when they change, not again at every scan.
		_, err := p.Rescan(ctx)
		p.rescans.served()
		switch {
		case err != nil && err.Error() != lastErr:
			logger.Error(err, "Rescan failed")
		case err == nil && lastErr != "":
			logger.Info("Rescan errors are gone")
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
	}
}
