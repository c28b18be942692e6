package driver

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/inventory"
)

// WatchHealthStatus sends the health of every device now, then again
// after every scan (Run scans on the health interval whether or not the
// kubelet holds this stream), until ctx ends. A device that is not
// Healthy is reported Unhealthy, its message saying which grade and why.
// It reads the inventory's snapshots: a report never waits behind a
// prepare.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	logger := klog.FromContext(ctx)
	logger.Info("The kubelet reads the devices' health", "interval", p.ops.healthInterval)
	defer logger.V(2).Info("The kubelet's health stream ended")
	for {
		// Asked for before the report is read: a scan that ends while the
		// report is sent is not missed.
		scanned := p.inv.Next()
		select {
		case <-ctx.Done():
			return nil
		case reports <- p.healthReport(p.inv.Load()):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-scanned:
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
		// The kubelet knows Healthy, Unhealthy and Unknown: a degraded
		// device is reported Unhealthy, as its claim's Healthy condition
		// is False; the message starts with its grade, and the taint's
		// effect (None) is what tells the scheduler it may still be used.
		h, status := snap.Health[n], kubeletplugin.HealthStatusHealthy
		if h.Grade != health.Healthy {
			status = kubeletplugin.HealthStatusUnhealthy
		}
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: p.cfg.NodeName, DeviceName: n, Health: status, Message: h.Said(),
			LastUpdated: now, HealthCheckTimeout: 3 * p.ops.healthInterval,
		})
	}
	return r
}

// reportHealth logs each change of health once, records it as an Event on
// the Node, and sets the device's health metric.
func (p *Plugin) reportHealth(ctx context.Context, snap *inventory.Snapshot, changes []inventory.Change) {
	logger := klog.FromContext(ctx)
	grades := p.ops.metrics.Health.Grade
	for _, c := range changes {
		grades.DeletePartialMatch(prometheus.Labels{"device": c.Device})
		if c.Now.Grade != health.Healthy {
			grades.WithLabelValues(c.Device, c.Now.Grade.String(), c.Now.Reason).Set(1)
		}
		what := "EFA " + c.Device
		if c.RDMAName != "" {
			what += " (" + c.RDMAName + ")"
		}
		if snap.IsGroup(c.Device) {
			what = "EFA group " + c.Device
		}
		switch c.Now.Grade {
		case health.Unhealthy:
			msg := fmt.Sprintf("%s is unhealthy: %s; kept out of new allocations, allocated claims keep it", what, c.Now.Message)
			logger.Info("EFA unhealthy", "device", c.Device, "rdmaDevice", c.RDMAName, "reason", c.Now.Reason, "why", c.Now.Message)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, c.Device, msg)
		case health.Degraded:
			msg := fmt.Sprintf("%s is degraded: %s; still allocated, marked with a taint of effect None", what, c.Now.Message)
			logger.Info("EFA degraded", "device", c.Device, "rdmaDevice", c.RDMAName, "reason", c.Now.Reason, "why", c.Now.Message)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonDegraded, c.Device, msg)
		default:
			logger.Info("EFA healthy again", "device", c.Device, "rdmaDevice", c.RDMAName, "was", c.Was.Grade.String())
			p.ops.events.Record(corev1.EventTypeNormal, events.ReasonHealthy, c.Device, what+" is healthy again")
		}
	}
}
