package publishing

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// Target is where a Publisher publishes: a Slices in the plugin, a
// recorder in tests.
type Target interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// withdrawer is a Target that can stop publishing and remove what it
// published, leaving any other publisher's slices alone (Slices).
type withdrawer interface {
	Withdraw(ctx context.Context) error
}

// Publisher publishes the inventory's snapshots: each with its health
// applied, only when it differs from what was published last, and no
// pool at all while the plugin stands aside. It also keeps what the API
// server refused of a publish (HandleError), which changes how the next
// snapshot is built (Config) and published. Its lock guards its own state
// and is never held across an API call; it reads the claim state never.
type Publisher struct {
	mu        sync.Mutex
	to        Target
	published *resourceslice.DriverResources // last published
	refused   Refused
	// stopping: a fatal publishing error is withdrawing the slices and
	// stopping the plugin.
	stopping bool
	opts     PublisherOptions
}

// Refused is what the API server refused of the slices, each said once
// and done without from then on.
type Refused struct {
	// Taints: the API server drops device taints (DRADeviceTaints off),
	// so unhealthy devices are left out of the slices instead.
	Taints bool
	// Sharing: the API server drops consumable capacity
	// (DRAConsumableCapacity off), so EFAs are published for one claim at
	// a time whatever --sharing says.
	Sharing bool
	// NoneEffect: the API server refuses taints of effect None (it
	// predates the effect), so degraded devices are published unmarked.
	NoneEffect bool
	// NUMAList: the API server refuses numaNode in list form, so it is
	// published as a number whatever --numa-list says.
	NUMAList bool
}

// PublisherOptions are what a Publisher reports to and calls.
type PublisherOptions struct {
	// Config is the plugin's publishing configuration, before what the API
	// server refused.
	Config  resources.Config
	Metrics *metrics.Metrics
	Events  *events.Recorder
	// Stop stops the plugin on a fatal error; Spawn starts the goroutine
	// that withdraws the slices before it (the run's, which waits for it).
	Stop  func(err error)
	Spawn func(func())
	// AskRescan asks for a scan soon, to publish without what the API
	// server refused.
	AskRescan func()
}

// NewPublisher returns a Publisher with no target yet.
func NewPublisher(o PublisherOptions) *Publisher {
	if o.Stop == nil {
		o.Stop = func(error) {}
	}
	if o.Spawn == nil {
		o.Spawn = func(f func()) { go f() }
	}
	if o.AskRescan == nil {
		o.AskRescan = func() {}
	}
	return &Publisher{opts: o}
}

// SetTarget sets where Publish publishes (the helper exists only after
// kubeletplugin.Start, which needs the plugin first), forgetting what was
// published before.
func (p *Publisher) SetTarget(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.to, p.published = t, nil
}

// Config is the configuration a scan builds its snapshot with: the
// plugin's, less what the API server refused.
func (p *Publisher) Config() resources.Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg := p.opts.Config
	if p.refused.NUMAList {
		cfg.NUMAList = false
	}
	if p.refused.Sharing {
		cfg.Sharing = resources.SharingNone
	}
	return cfg
}

// Publish publishes snap, with its health, when it differs from what was
// published last; while the plugin stands aside it withdraws the slices
// instead. It reports whether it published.
func (p *Publisher) Publish(ctx context.Context, snap *inventory.Snapshot) (bool, error) {
	p.mu.Lock()
	pub, support := p.to, resources.TaintSupport{NoTaints: p.refused.Taints, NoNoneEffect: p.refused.NoneEffect}
	cur, n := snap.Published(p.opts.Config, support)
	same := cur != nil && p.published != nil && apiequality.Semantic.DeepEqual(*p.published, *cur)
	prev := p.published
	p.mu.Unlock()
	unhealthy, degraded := p.opts.Metrics.Health.Unhealthy, p.opts.Metrics.Health.Degraded
	unhealthy.WithLabelValues("taint").Set(float64(n.Unhealthy))
	unhealthy.WithLabelValues("withhold").Set(0)
	degraded.WithLabelValues("taint").Set(float64(n.Degraded))
	degraded.WithLabelValues("none").Set(0)
	if support.NoTaints {
		unhealthy.WithLabelValues("taint").Set(0)
		unhealthy.WithLabelValues("withhold").Set(float64(n.Unhealthy))
	}
	if support.NoTaints || support.NoNoneEffect {
		degraded.WithLabelValues("taint").Set(0)
		degraded.WithLabelValues("none").Set(float64(n.Degraded))
	}
	if pub == nil || cur == nil || same {
		return false, nil
	}
	logger := klog.FromContext(ctx)
	if w, ok := pub.(withdrawer); ok && snap.StandAside != "" {
		if err := w.Withdraw(ctx); err != nil {
			err = fmt.Errorf("withdraw: %w", err)
			p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "withdrawing the EFAs' ResourceSlices failed: "+err.Error())
			return false, err
		}
		logger.Info("Withdrew the node's ResourceSlices", "why", "standing aside")
	} else if err := pub.PublishResources(ctx, *cur.DeepCopy()); err != nil {
		err = fmt.Errorf("publish: %w", err)
		p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "publishing the EFAs' ResourceSlices failed: "+err.Error())
		return false, err
	} else {
		kv := publishChanges(prev, cur)
		if snap.ScanErr != "" {
			// What the scan could not read is why a device went or changed.
			kv = append(kv, "scanErrors", snap.ScanErr)
		}
		logger.Info("Published", kv...)
	}
	p.mu.Lock()
	p.published = cur
	p.mu.Unlock()
	p.opts.Metrics.Published.Add(1)
	return true, nil
}

// publishChanges says what a publish changes, as log key/value pairs: the
// device count, and the devices added, removed, tainted, untainted and
// otherwise changed (attributes, counters) since prev; everything is
// added on a first publish, which says so instead of listing them.
func publishChanges(prev, cur *resourceslice.DriverResources) []any {
	devices := func(r *resourceslice.DriverResources) map[string]resourceapi.Device {
		out := map[string]resourceapi.Device{}
		if r == nil {
			return out
		}
		for _, pool := range r.Pools {
			for _, s := range pool.Slices {
				for _, d := range s.Devices {
					out[d.Name] = d
				}
			}
		}
		return out
	}
	was, now := devices(prev), devices(cur)
	kv := []any{"devices", len(now)}
	if prev == nil {
		return append(kv, "first", true)
	}
	var added, removed, tainted, untainted, changed []string
	for name, d := range now {
		old, ok := was[name]
		switch {
		case !ok:
			added = append(added, name)
		case len(old.Taints) == 0 && len(d.Taints) > 0:
			tainted = append(tainted, name+"="+d.Taints[0].Value)
		case len(old.Taints) > 0 && len(d.Taints) == 0:
			untainted = append(untainted, name)
		case !apiequality.Semantic.DeepEqual(old, d):
			changed = append(changed, name)
		}
	}
	for name := range was {
		if _, ok := now[name]; !ok {
			removed = append(removed, name)
		}
	}
	for _, f := range []struct {
		key   string
		names []string
	}{{"added", added}, {"removed", removed}, {"tainted", tainted}, {"untainted", untainted}, {"changed", changed}} {
		if len(f.names) > 0 {
			slices.Sort(f.names)
			kv = append(kv, f.key, f.names)
		}
	}
	if len(kv) == 2 {
		// Same devices: the counters or the slices around them changed.
		kv = append(kv, "changed", "counters or slices")
	}
	return kv
}
