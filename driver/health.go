package driver

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver/events"
	"github.com/efakit/efakit/driver/inventory"
)

// WatchHealthStatus sends the health of every device now, then again on
// every health interval after a scan of sysfs (which Run makes), until
// ctx ends: a device that disappears, loses its driver, leaves ACTIVE or
// loses its uverbs node is reported Unhealthy. It reads the inventory's
// snapshots: a report never waits behind a prepare.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(p.ops.healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- p.healthReport(p.inv.Load()):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// The scan runs in Run, the one goroutine that scans; the report
		// waits for its snapshot, an interval at most.
		scanned := p.inv.Next()
		p.askRescan(rescanHealth)
		select {
		case <-ctx.Done():
			return nil
		case <-scanned:
		case <-time.After(p.ops.healthInterval):
		}
	}
}

// healthReport is the kubelet's report of every device of snap.
func (p *Plugin) healthReport(snap *inventory.Snapshot) kubeletplugin.DeviceHealthReport {
	now := time.Now()
	names := make([]string, 0, len(snap.Health))
	for n := range snap.Health {
		names = append(names, n)
	}
	sort.Strings(names)
	var r kubeletplugin.DeviceHealthReport
	for _, n := range names {
		h, status := snap.Health[n], kubeletplugin.HealthStatusHealthy
		if h.Unhealthy {
			status = kubeletplugin.HealthStatusUnhealthy
		}
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: p.cfg.NodeName, DeviceName: n, Health: status, Message: h.Message,
			LastUpdated: now, HealthCheckTimeout: 3 * p.ops.healthInterval,
		})
	}
	return r
}

// reportHealth logs each change of health once, and records it as an
// Event on the Node.
func (p *Plugin) reportHealth(ctx context.Context, snap *inventory.Snapshot, changes []inventory.Change) {
	logger := klog.FromContext(ctx)
	for _, c := range changes {
		what := "EFA " + c.Device
		if c.RDMAName != "" {
			what += " (" + c.RDMAName + ")"
		}
		if snap.IsGroup(c.Device) {
			what = "EFA group " + c.Device
		}
		if c.Now.Unhealthy {
			msg := fmt.Sprintf("%s is unhealthy: %s; kept out of new allocations, allocated claims keep it", what, c.Now.Message)
			logger.Info("EFA unhealthy", "device", c.Device, "rdmaDevice", c.RDMAName, "why", c.Now.Message)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, c.Device, msg)
			continue
		}
		logger.Info("EFA healthy again", "device", c.Device, "rdmaDevice", c.RDMAName)
		p.ops.events.Record(corev1.EventTypeNormal, events.ReasonHealthy, c.Device, what+" is healthy again")
	}
}
