package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver/resources"
	"github.com/efakit/efakit/topology"
)

// SetPublisher sets where Rescan publishes; the helper exists only after
// kubeletplugin.Start, which needs the Plugin first.
func (p *Plugin) SetPublisher(pub Publisher) {
	p.mu.Lock()
	p.pub = pub
	p.published = nil
	p.mu.Unlock()
}

// Rescan reads sysfs again, updates the inventory and health, and publishes
// only when the devices changed, so a node in a steady state makes no API
// writes. It reports whether it published.
func (p *Plugin) Rescan(ctx context.Context) (bool, error) {
	start := time.Now()
	topo, scanErr := topology.Scan(p.sysfs)
	cfg := resources.Config(p.cfg)
	pool, buildErr := resources.Build(topo, cfg)
	res := driverResources(pool)
	inv := map[string]inventoryDevice{}
	for _, d := range topo.Of(topology.KindEFA) {
		if d.EFA.Verbs == nil {
			continue
		}
		dev, err := resources.EFADevice(topo, d, cfg)
		if err != nil {
			continue
		}
		inv[DeviceName(d.PCI.Address)] = inventoryDevice{RDMAName: d.Name, Uverbs: d.EFA.Verbs.Name,
			PCIAddress: d.PCI.Address.String(), Attributes: dev.Attributes}
	}
	groups := map[string][]string{}
	var groupAttrs = map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if p.cfg.Groups != GroupsNone {
		var members []*topology.Device
		for _, d := range topo.Of(topology.KindEFA) {
			if _, ok := inv[DeviceName(d.PCI.Address)]; ok {
				members = append(members, d)
			}
		}
		for _, g := range resources.Groups(topo, members).List {
			name := resources.GroupDeviceName(g.Root)
			groups[name] = g.MemberNames()
			if dev, err := resources.GroupDevice(topo, g, cfg); err == nil {
				groupAttrs[name] = dev.Attributes
			}
		}
	}
	err := errors.Join(scanErr, buildErr)
	p.Metrics.observeScan(time.Since(start), err, len(inv))
	healthy := map[string]deviceHealth{}
	for name, h := range resources.NodeHealth(topo, groups) {
		healthy[name] = kubeletHealth(h)
	}

	p.mu.Lock()
	// An EFA that was there and is gone is unhealthy until it returns (a
	// group that is gone is no device any more).
	for name := range p.health {
		if _, ok := healthy[name]; !ok && p.groups[name] == nil {
			healthy[name] = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "device gone from sysfs", "gone"}
		}
	}
	p.inventory, p.health, p.groups = inv, healthy, groups
	for name, attrs := range groupAttrs {
		p.inventory[name] = inventoryDevice{Attributes: attrs}
	}
	p.base = &res
	p.mu.Unlock()
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
	out, n := applyHealth(res, p.health, p.cfg, p.taintsDropped)
	taint, withhold := float64(n), 0.0
	if p.taintsDropped {
		taint, withhold = 0, float64(n)
	}
	p.Metrics.Unhealthy.WithLabelValues("taint").Set(taint)
	p.Metrics.Unhealthy.WithLabelValues("withhold").Set(withhold)
	return out
}

// applyHealth applies the plugin's health to the resources of a scan
// (resources.ApplyHealth, pool by pool) and returns the count of
// unhealthy devices.
func applyHealth(res resourceslice.DriverResources, health map[string]deviceHealth, cfg Config, withhold bool) (*resourceslice.DriverResources, int) {
	hs := make(map[string]resources.Health, len(health))
	for name, h := range health {
		hs[name] = resources.Health{Unhealthy: h.status == kubeletplugin.HealthStatusUnhealthy, Message: h.message, Reason: h.reason}
	}
	out := &resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	n := 0
	for name, pool := range res.Pools {
		p, k := resources.ApplyHealth(poolOf(name, pool), hs, resources.Config(cfg), withhold)
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
	pub, base, blocked := p.pub, p.base, p.blocked != ""
	var cur *resourceslice.DriverResources
	switch {
	case blocked:
		// No pool at all.
		cur = &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	case base != nil:
		cur = p.withHealth(*base)
	}
	same := cur != nil && p.published != nil && apiequality.Semantic.DeepEqual(*p.published, *cur)
	p.mu.Unlock()
	if pub == nil || cur == nil || same {
		return false, nil
	}
	if w, ok := pub.(withdrawer); ok && blocked {
		if err := w.Withdraw(ctx); err != nil {
			return false, fmt.Errorf("withdraw: %w", err)
		}
	} else if err := pub.PublishResources(ctx, *cur); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	p.mu.Lock()
	p.published = cur.DeepCopy()
	p.mu.Unlock()
	p.Metrics.Published.Add(1)
	return true, nil
}

// DeviceCount is the number of EFAs in the inventory.
func (p *Plugin) DeviceCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inventory)
}

// Recheck runs Precheck (API reads, so it runs with the periodic rescans,
// not with the health checks) and remembers why the plugin must publish
// and prepare nothing. When Precheck cannot tell (the API server does not
// answer), the last decision stands, so one failed read never puts the
// plugin beside another owner of the EFAs; before any decision, the
// plugin stands aside and checks again soon.
func (p *Plugin) Recheck(ctx context.Context) {
	if p.Precheck == nil {
		return
	}
	logger := klog.FromContext(ctx)
	v, err := p.Precheck(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.checked {
			logger.Error(err, "checking for another owner of the EFAs failed; keeping the last decision", "standingAside", p.blocked != "")
			return
		}
		v = Verdict{Key: "api", Reason: "cannot tell yet whether another owner has this node's EFAs: " + err.Error()}
		time.AfterFunc(5*time.Second, p.kickRescan)
	} else {
		p.checked = true
	}
	if v.Reason != p.blocked && v.Reason != "" {
		logger.Error(errors.New(v.Reason), "standing aside: publishing and preparing nothing")
	} else if v.Reason == "" && p.blocked != "" {
		logger.Info("no other owner of the EFAs any more: publishing", "was", p.blocked)
	}
	p.blocked = v.Reason
	for _, k := range []string{"netns", "device-plugin", "dra-driver", "api"} {
		val := 0.0
		if k == v.Key && v.Reason != "" {
			val = 1
		}
		p.Metrics.StandingAside.WithLabelValues(k).Set(val)
	}
}

// Verdict is a Precheck's answer: why the plugin must stand aside ("" when
// it may publish), and a short key for the metric.
type Verdict struct {
	Key    string // netns, device-plugin, dra-driver; api when the API cannot tell
	Reason string
}

// Run rescans every interval and whenever rescan receives, until ctx ends.
func (p *Plugin) Run(ctx context.Context, interval time.Duration, rescan <-chan struct{}) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rescan:
		case <-p.kick:
		}
		p.Recheck(ctx)
		if published, err := p.Rescan(ctx); err != nil {
			logger.Error(err, "rescan")
		} else if published {
			logger.Info("published changed devices")
		}
	}
}
