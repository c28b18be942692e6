package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver/events"
	"github.com/efakit/efakit/driver/owners"
	"github.com/efakit/efakit/driver/resources"
	"github.com/efakit/efakit/topology"
)

// SetPublisher sets where Rescan publishes; the helper exists only after
// kubeletplugin.Start, which needs the Plugin first.
func (p *Plugin) SetPublisher(pub Publisher) {
	p.mu.Lock()
	p.publishing.to = pub
	p.publishing.published = nil
	p.mu.Unlock()
}

// Rescan reads sysfs again, updates the inventory and health, and publishes
// only when the devices changed, so a node in a steady state makes no API
// writes. It reports whether it published.
func (p *Plugin) Rescan(ctx context.Context) (bool, error) {
	start := time.Now()
	topo, scanErr := topology.Scan(p.sysfs)
	cfg := resources.Config(p.cfg)
	p.mu.Lock()
	if p.publishing.numaScalar {
		cfg.NUMAList = false
	}
	if p.publishing.sharingDropped {
		cfg.Sharing = resources.SharingNone
	}
	p.mu.Unlock()
	pool, buildErr := resources.Build(topo, cfg)
	res := driverResources(pool)
	inv := map[string]inventoryDevice{}
	for _, d := range topo.Of(topology.KindEFA) {
		if d.EFA.Verbs == nil {
			continue
		}
		// Only what is published (the API's limits checked); its metadata
		// is more (resources.MetadataOnly).
		_, attrs, err := resources.EFADeviceMetadata(topo, d, cfg)
		if err != nil {
			continue
		}
		inv[resources.DeviceName(d.PCI.Address)] = inventoryDevice{RDMAName: d.Name, Uverbs: d.EFA.Verbs.Name,
			Major: d.EFA.Verbs.Major, Minor: d.EFA.Verbs.Minor,
			PCIAddress: d.PCI.Address.String(), Attributes: attrs, EFA: d.EFA}
	}
	groups := map[string][]string{}
	var groupAttrs = map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if p.cfg.Groups != resources.GroupsNone {
		var members []*topology.Device
		for _, d := range topo.Of(topology.KindEFA) {
			if _, ok := inv[resources.DeviceName(d.PCI.Address)]; ok {
				members = append(members, d)
			}
		}
		for _, g := range resources.Groups(topo, members).List {
			name := resources.GroupDeviceName(g.Root)
			groups[name] = g.MemberNames()
			if _, attrs, err := resources.GroupDeviceMetadata(topo, g, cfg); err == nil {
				groupAttrs[name] = attrs
			}
		}
	}
	err := errors.Join(scanErr, buildErr)
	p.ops.metrics.ObserveScan(time.Since(start), err, len(inv))
	health := resources.NodeHealth(topo, nil)

	p.mu.Lock()
	// An EFA that was there and is gone is unhealthy until it returns.
	for name := range p.inv.health {
		if _, ok := health[name]; !ok && p.inv.healthMembers[name] == nil {
			health[name] = resources.Health{Unhealthy: true, Message: "device gone from sysfs", Reason: "gone"}
		}
	}
	// A group is as healthy as its least healthy member, counting the
	// members that left it unhealthy (gone, lost their uverbs device):
	// without them a group would shrink and stay healthy.
	members := map[string][]string{}
	for name, ms := range groups {
		members[name] = slices.Clone(ms)
	}
	for name, old := range p.inv.healthMembers {
		for _, m := range old {
			if health[m].Unhealthy && !slices.Contains(members[name], m) {
				members[name] = append(members[name], m)
			}
		}
	}
	healthy := make(map[string]deviceHealth, len(health)+len(members))
	for name, h := range health {
		healthy[name] = kubeletHealth(h)
	}
	for name, ms := range members {
		slices.Sort(ms)
		healthy[name] = kubeletHealth(resources.GroupHealth(ms, health))
	}
	changes := p.healthChanges(healthy, inv)
	p.inv.devices, p.inv.health, p.inv.groups, p.inv.healthMembers = inv, healthy, groups, members
	for name, attrs := range groupAttrs {
		p.inv.devices[name] = inventoryDevice{Attributes: attrs}
	}
	scanned := p.inv.devices
	p.scanned.Store(&scanned)
	p.inv.base = &res
	p.inv.scanErr = ""
	if err != nil {
		p.inv.scanErr = err.Error()
	}
	// The other plugin pod of a rolling update may have prepared claims
	// since this one read the checkpoint (one stat tells).
	p.reloadState(ctx)
	renumbered := p.renumberedSince()
	p.mu.Unlock()
	if renumbered {
		p.correctRenumbered(ctx)
	}
	// The claims' status: health and ports as this scan found them, after
	// a renumbering is corrected.
	p.mu.Lock()
	p.syncStatus()
	p.mu.Unlock()
	p.reportHealth(ctx, changes)
	published, perr := p.Publish(ctx)
	return published, errors.Join(err, perr)
}

// kubeletHealth is a device's health as the kubelet is told it.
func kubeletHealth(h resources.Health) deviceHealth {
	if h.Unhealthy {
		return deviceHealth{kubeletplugin.HealthStatusUnhealthy, h.Message, h.Reason}
	}
	return deviceHealth{status: kubeletplugin.HealthStatusHealthy}
}

// withHealth applies the plugin's health to the resources of a scan.
func (p *Plugin) withHealth(res resourceslice.DriverResources) *resourceslice.DriverResources {
	out, n := applyHealth(res, p.inv.health, p.cfg, p.publishing.taintsDropped)
	taint, withhold := float64(n), 0.0
	if p.publishing.taintsDropped {
		taint, withhold = 0, float64(n)
	}
	p.ops.metrics.Unhealthy.WithLabelValues("taint").Set(taint)
	p.ops.metrics.Unhealthy.WithLabelValues("withhold").Set(withhold)
	return out
}

// applyHealth applies the plugin's health to the resources of a scan
// (resources.ApplyHealth, pool by pool) and returns the count of
// unhealthy devices.
func applyHealth(res resourceslice.DriverResources, health map[string]deviceHealth, cfg resources.Config, withhold bool) (*resourceslice.DriverResources, int) {
	hs := make(map[string]resources.Health, len(health))
	for name, h := range health {
		hs[name] = resources.Health{Unhealthy: h.status == kubeletplugin.HealthStatusUnhealthy, Message: h.message, Reason: h.reason}
	}
	out := &resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	n := 0
	for name, pool := range res.Pools {
		p, k := resources.ApplyHealth(poolOf(name, pool), hs, cfg, withhold)
		out.Pools[name] = driverResources(p).Pools[name]
		n += k
	}
	return out, n
}

// withdrawer is a Publisher that can stop publishing and remove what it
// published, leaving any other publisher's slices alone.
type withdrawer interface {
	Withdraw(ctx context.Context) error
}

// Publish publishes the devices of the last scan, with their health, when
// they differ from what was published last. While the plugin stands aside
// it withdraws its slices instead.
func (p *Plugin) Publish(ctx context.Context) (bool, error) {
	p.mu.Lock()
	pub, base, blocked := p.publishing.to, p.inv.base, p.publishing.blocked != ""
	var cur *resourceslice.DriverResources
	switch {
	case blocked:
		// No pool at all.
		cur = &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	case base != nil:
		cur = p.withHealth(*base)
	}
	same := cur != nil && p.publishing.published != nil && apiequality.Semantic.DeepEqual(*p.publishing.published, *cur)
	prev, scanErr := p.publishing.published, p.inv.scanErr
	p.mu.Unlock()
	if pub == nil || cur == nil || same {
		return false, nil
	}
	logger := klog.FromContext(ctx)
	if w, ok := pub.(withdrawer); ok && blocked {
		if err := w.Withdraw(ctx); err != nil {
			err = fmt.Errorf("withdraw: %w", err)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "withdrawing the EFAs' ResourceSlices failed: "+err.Error())
			return false, err
		}
		logger.Info("Withdrew the node's ResourceSlices", "why", "standing aside")
	} else if err := pub.PublishResources(ctx, *cur); err != nil {
		err = fmt.Errorf("publish: %w", err)
		p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "publishing the EFAs' ResourceSlices failed: "+err.Error())
		return false, err
	} else {
		kv := publishChanges(prev, cur)
		if scanErr != "" {
			// What the scan could not read is why a device went or changed.
			kv = append(kv, "scanErrors", scanErr)
		}
		logger.Info("Published", kv...)
	}
	p.mu.Lock()
	p.publishing.published = cur.DeepCopy()
	p.mu.Unlock()
	p.ops.metrics.Published.Add(1)
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

// DeviceCount is the number of EFAs in the inventory.
func (p *Plugin) DeviceCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inv.devices)
}

// ownerCheckTimeout bounds one check for another owner of the EFAs: a
// check that cannot answer within it cannot tell (the last decision
// stands).
const ownerCheckTimeout = 10 * time.Second

// Recheck runs Precheck (API reads, so it runs with the periodic rescans,
// not with the health checks) and remembers why the plugin must publish
// and prepare nothing. When Precheck cannot tell (the API server does not
// answer), the last decision stands, so one failed read never puts the
// plugin beside another owner of the EFAs; before any decision, the
// plugin stands aside and checks again soon.
func (p *Plugin) Recheck(ctx context.Context) {
	if p.ops.precheck == nil {
		return
	}
	logger := klog.FromContext(ctx)
	// Bounded: the check runs in Run's loop, which also makes the health
	// checks' scans; an API server that does not answer must not hold
	// them past the kubelet's health timeout.
	cctx, cancel := context.WithTimeout(ctx, ownerCheckTimeout)
	v, err := p.ops.precheck(cctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	// A failed check is logged when it starts or its error changes, not
	// at every scan while the API server is away.
	if err != nil && err.Error() != p.publishing.checkErr {
		p.publishing.checkErr = err.Error()
		if p.publishing.checked {
			logger.Error(err, "Checking for another owner of the EFAs failed", "then", "keeping the last decision", "standingAside", p.publishing.blocked != "")
		}
	} else if err == nil && p.publishing.checkErr != "" {
		p.publishing.checkErr = ""
		logger.Info("Checking for another owner of the EFAs works again")
	}
	if err != nil {
		if p.publishing.checked {
			return
		}
		v = owners.Verdict{Key: "api", Reason: "cannot tell yet whether another owner has this node's EFAs: " + err.Error()}
		// Jittered, so that a fleet that started while the API server
		// was away does not ask again in step.
		p.rescans.askAfter(wait.Jitter(5*time.Second, 1), rescanOwnerWait)
	} else {
		p.publishing.checked = true
	}
	if v.Reason != p.publishing.blocked && v.Reason != "" {
		logger.Error(errors.New(v.Reason), "Standing aside", "then", "publishing and preparing nothing")
		p.ops.events.Record(corev1.EventTypeWarning, events.ReasonStandingAside, "", "efakit publishes and prepares no EFA on this node: "+v.Reason)
	} else if v.Reason == "" && p.publishing.blocked != "" {
		logger.Info("No other owner of the EFAs any more; publishing", "was", p.publishing.blocked)
		p.ops.events.Record(corev1.EventTypeNormal, events.ReasonPublishing, "", "efakit publishes this node's EFAs again; it stood aside because "+p.publishing.blocked)
	}
	p.publishing.blocked = v.Reason
	for _, k := range []string{"netns", "device-plugin", "dra-driver", "api"} {
		val := 0.0
		if k == v.Key && v.Reason != "" {
			val = 1
		}
		p.ops.metrics.StandingAside.WithLabelValues(k).Set(val)
	}
}
