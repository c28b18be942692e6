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
	res, buildErr := Resources(topo, p.names, p.cfg)
	inv := map[string]inventoryDevice{}
	healthy := map[string]deviceHealth{}
	for _, d := range topo.Of(topology.KindEFA) {
		name := DeviceName(d.PCI.Address)
		h := deviceHealth{status: kubeletplugin.HealthStatusHealthy}
		switch {
		case d.PCI.Driver != "efa":
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, fmt.Sprintf("driver %q, not efa", d.PCI.Driver)}
		case d.EFA.Verbs == nil:
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "no uverbs device"}
		case len(d.EFA.Ports) == 0 || d.EFA.Ports[0].State != "ACTIVE":
			state := "none"
			if len(d.EFA.Ports) > 0 {
				state = d.EFA.Ports[0].State
			}
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "port " + state}
		}
		healthy[name] = h
		if d.EFA.Verbs == nil {
			continue
		}
		dev, err := EFADevice(topo, d, p.names, p.cfg)
		if err != nil {
			continue
		}
		inv[name] = inventoryDevice{RDMAName: d.Name, Uverbs: d.EFA.Verbs.Name, Major: d.EFA.Verbs.Major, Minor: d.EFA.Verbs.Minor,
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
		for _, g := range Groups(topo, members).List {
			name := GroupDeviceName(g.Root)
			for _, m := range g.Members {
				groups[name] = append(groups[name], DeviceName(m.PCI.Address))
			}
			if dev, err := GroupDevice(topo, g, p.cfg); err == nil {
				groupAttrs[name] = dev.Attributes
			}
		}
	}
	err := errors.Join(scanErr, buildErr)
	p.Metrics.observeScan(time.Since(start), err, len(inv))

	p.mu.Lock()
	// A device that was there and is gone is unhealthy until it returns.
	for name := range p.health {
		if _, ok := healthy[name]; !ok {
			healthy[name] = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "device gone from sysfs"}
		}
	}
	p.inventory, p.health, p.groups = inv, healthy, groups
	for name, attrs := range groupAttrs {
		p.inventory[name] = inventoryDevice{Attributes: attrs}
	}
	p.current = &res
	p.mu.Unlock()
	published, perr := p.Publish(ctx)
	return published, errors.Join(err, perr)
}

// Publish publishes the devices of the last scan when they differ from what
// was published last.
func (p *Plugin) Publish(ctx context.Context) (bool, error) {
	p.mu.Lock()
	pub, cur := p.pub, p.current
	if p.blocked != "" {
		// No pool at all: the controller removes the slices it published.
		cur = &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	}
	same := cur != nil && p.published != nil && apiequality.Semantic.DeepEqual(*p.published, *cur)
	p.mu.Unlock()
	if pub == nil || cur == nil || same {
		return false, nil
	}
	if err := pub.PublishResources(ctx, *cur); err != nil {
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

// Recheck runs Precheck (an API read, so it runs with the periodic rescans,
// not with the health checks) and remembers why the plugin must publish
// nothing.
func (p *Plugin) Recheck(ctx context.Context) {
	if p.Precheck == nil {
		return
	}
	reason := p.Precheck(ctx)
	p.mu.Lock()
	if reason != p.blocked && reason != "" {
		klog.FromContext(ctx).Error(errors.New(reason), "publishing no devices")
	}
	p.blocked = reason
	p.mu.Unlock()
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
