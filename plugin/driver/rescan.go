package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/topology"
)

// rescanReason says why a scan is asked for. Every reason but a uevent and
// the health interval also checks again for another owner of the EFAs
// (API reads whose answer does not depend on sysfs).
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
	rescanHealth    rescanReason = "health"     // the health checks' interval (Run's own): sysfs only
)

// recheck tells whether a scan for the reason checks for another owner.
func (r rescanReason) recheck() bool { return r != rescanUevent && r != rescanHealth }

// anyRecheck tells whether one of the reasons checks for another owner.
func anyRecheck(rs []rescanReason) bool {
	return slices.ContainsFunc(rs, rescanReason.recheck)
}

// rescanQueue is the scans asked for and not yet made: client-go's
// delaying workqueue of reasons. A reason asked for while it waits is one
// request; one asked for during a scan is queued again for the next
// (the workqueue's dirty set); a delayed request (the owner check's
// retry, the next periodic scan) waits in the queue, not in a goroutine
// of the caller's.
type rescanQueue = workqueue.TypedDelayingInterface[rescanReason]

func newRescanQueue() rescanQueue {
	return workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[rescanReason]{})
}

// take waits for the next request and returns it with every other one
// waiting, in the order first asked; false once the queue is shut down.
// The caller calls done with them after the scan.
func take(q rescanQueue) ([]rescanReason, bool) {
	r, shutdown := q.Get()
	if shutdown {
		return nil, false
	}
	reasons := []rescanReason{r}
	for q.Len() > 0 {
		r, shutdown := q.Get()
		if shutdown {
			break
		}
		reasons = append(reasons, r)
	}
	return reasons, true
}

// done marks the reasons of a scan as served.
func done(q rescanQueue, reasons []rescanReason) {
	for _, r := range reasons {
		q.Done(r)
	}
}

// askRescan asks Run for a scan soon, saying why; it never blocks.
func (p *Plugin) askRescan(reason rescanReason) { p.rescans.Add(reason) }

// Run rescans every interval, every health interval, and whenever a scan
// is asked for (askRescan: SIGHUP, uevents, ...), until ctx ends; it
// shuts the queue down. It is the one goroutine that scans once
// the plugin serves: the inventory has one writer. Each scan checks again
// for another owner of the EFAs unless only uevents or the health
// interval asked for it.
func (p *Plugin) Run(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	stop := context.AfterFunc(ctx, p.rescans.ShutDown)
	defer stop()
	p.rescans.AddAfter(rescanInterval, interval)
	// The health checks are Run's own, whether or not the kubelet holds
	// the health stream (it does not without ResourceHealthStatus):
	// taints, withheld devices, claim status and Events follow them.
	p.rescans.AddAfter(rescanHealth, p.ops.healthInterval)
	var lastErr string
	for {
		reasons, ok := take(p.rescans)
		if !ok || ctx.Err() != nil {
			return
		}
		logger.V(2).Info("Rescanning", "reasons", reasons)
		if anyRecheck(reasons) {
			p.Recheck(ctx)
		}
		// Publish logs what it changed; a scan's errors are logged here
		// when they change, not again at every scan.
		_, err := p.Rescan(ctx)
		done(p.rescans, reasons)
		if slices.Contains(reasons, rescanInterval) {
			p.rescans.AddAfter(rescanInterval, interval)
		}
		if slices.Contains(reasons, rescanHealth) {
			p.rescans.AddAfter(rescanHealth, p.ops.healthInterval)
		}
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

// Rescan reads sysfs again, replaces the inventory with what it found, and
// publishes only when the devices changed, so a node in a steady state
// makes no API writes. It reports whether it published. Then the claims
// whose EFAs it finds renumbered get their specs corrected, and their
// status follows the scan. It takes the claim state's lock only for that
// correction, after it published, never while it reads sysfs.
func (p *Plugin) Rescan(ctx context.Context) (bool, error) {
	p.scanMu.Lock()
	start := time.Now()
	topo, scanErr := placed.Scan(p.sysfs, false)
	gdr, gerr := p.assessGPUDirect(topo)
	// Each EFA's counters and port, added to its history, grade it. The
	// counters are the EFA exporter's read (one read for the scrapes and
	// the checks, its wait bounded: a hung device's read does not hold
	// the scan).
	// A new read each time; a scrape within the exporter's CacheFor
	// after it is served this one. The EFAs read are those of the last
	// snapshot: one that is new is graded on its counters from the next
	// scan on (its first read is its baseline either way).
	read := p.ops.efa.Counters(0)
	verdicts := resources.Grade(topo, p.ops.grader, resources.CountersOf(read), start)
	if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
		counts := map[string]map[string]uint64{}
		for name, v := range verdicts {
			for rule, n := range v.Counts {
				if n > 0 {
					if counts[name] == nil {
						counts[name] = map[string]uint64{}
					}
					counts[name][rule] = n
				}
			}
		}
		logger.Info("Graded", "countersRead", len(read), "efas", len(verdicts), "advancedInWindow", counts)
	}
	snap, changes, err := inventory.Build(topo, scanErr, p.pub.Config(), p.inv.Load(), verdicts)
	snap.GPUDirect = gdr
	efas := 0
	for _, d := range snap.Devices {
		if d.EFA != nil {
			efas++
		}
	}
	p.ops.metrics.ObserveScan(time.Since(start), err, efas)
	p.inv.Store(snap)
	p.scanMu.Unlock()
	p.reportHealth(ctx, snap, changes)
	// Published before the claims are looked at: a correction below waits
	// for the claim state's lock, and what is published never does.
	published, perr := p.Publish(ctx)
	// Stored first, then checked: a prepare saves first, then checks
	// (PrepareResourceClaims), so one of the two sees the other.
	if p.claims.Renumbered(ctx, snap) {
		if rerr := p.claims.RepairSpecs(ctx); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Correcting the CDI specs of renumbered EFAs")
		}
	}
	// Each claim's traffic from the same counters, then the claims'
	// status: health, ports and traffic as this scan found them, after a
	// renumbering is corrected.
	p.observeTraffic(ctx, start, read)
	p.claims.SyncStatus(snap)
	return published, errors.Join(err, perr, gerr)
}

// assessGPUDirect judges each GPU with its closest EFAs (gpudirect.Assess;
// ACS is efakit topo's, since config space is slow to read), by the EFA's
// PCI address, for the claims' status.
func (p *Plugin) assessGPUDirect(topo *topology.Topology) (map[string][]gpudirect.Pair, error) {
	if len(topo.Of(topology.KindGPU)) == 0 {
		return nil, nil
	}
	n, err := gpudirect.ReadNode(p.sysfs, p.proc)
	pairs := gpudirect.Assess(topo, n)
	out := map[string][]gpudirect.Pair{}
	for _, x := range pairs {
		k := x.EFA.PCI.Address.String()
		out[k] = append(out[k], x)
	}
	if err != nil {
		err = fmt.Errorf("gpudirect: %w", err)
	}
	return out, err
}

// Recheck asks the owner check (API reads, so it runs with the periodic
// rescans, not with the health checks) whether the plugin must stand
// aside, and makes the inventory say so when the answer changed.
func (p *Plugin) Recheck(ctx context.Context) {
	why := p.gate.Decide(ctx)
	p.scanMu.Lock()
	defer p.scanMu.Unlock()
	if cur := p.inv.Load(); cur.StandAside != why {
		p.inv.Store(cur.WithStandAside(why))
	}
}

// Publish publishes the inventory as it is now (see publishing.Publisher).
func (p *Plugin) Publish(ctx context.Context) (bool, error) {
	return p.pub.Publish(ctx, p.inv.Load())
}
