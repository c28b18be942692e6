package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// HandleError logs background errors (publishing); a fatal one stops the
// plugin through Stop.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && slices.Equal(dropped.DisabledFeatures(), []string{"DRADeviceTaints"}) {
		// The API server does not keep device taints (DRADeviceTaints off,
		// as on 1.34 and 1.35 by default): unhealthy devices are left out
		// of the slices instead, from the next publish on.
		p.mu.Lock()
		first := !p.taintsDropped
		p.taintsDropped = true
		p.mu.Unlock()
		if first {
			klog.FromContext(ctx).Info("the API server drops device taints (DRADeviceTaints disabled): unhealthy EFAs are withheld from the ResourceSlices instead of tainted")
			p.kickRescan()
		}
		return
	}
	if errors.As(err, &dropped) {
		// The API server dropped what it does not know: in mixed mode the
		// counters that keep a group and its members apart. Publishing on
		// would allow double allocation, so the plugin stops.
		err = fmt.Errorf("the API server dropped fields of the published slices (disabled features: %v); group mode %q needs DRAPartitionableDevices: run with --groups=none or exclusive: %w",
			dropped.DisabledFeatures(), p.cfg.Groups, err)
		klog.FromContext(ctx).Error(err, msg)
		if p.Stop != nil {
			p.Stop(err)
		}
		return
	}
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && p.Stop != nil {
		p.Stop(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus sends the health of every device now, then again on
// every HealthInterval (re-scanning sysfs), until ctx ends: a device that
// disappears, loses its driver, leaves ACTIVE or loses its uverbs node is
// reported Unhealthy.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(p.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- p.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = p.Rescan(ctx)
		}
	}
}

func (p *Plugin) healthReport() kubeletplugin.DeviceHealthReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	names := make([]string, 0, len(p.health))
	for n := range p.health {
		names = append(names, n)
	}
	sort.Strings(names)
	var r kubeletplugin.DeviceHealthReport
	for _, n := range names {
		h := p.health[n]
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: p.cfg.NodeName, DeviceName: n, Health: h.status, Message: h.message,
			LastUpdated: now, HealthCheckTimeout: 3 * p.HealthInterval,
		})
	}
	return r
}
