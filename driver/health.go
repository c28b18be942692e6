package driver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver/events"
	"github.com/efakit/efakit/driver/resources"
)

// HandleError logs background errors (publishing); a fatal one stops the
// plugin through Stop.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && p.fallBack(ctx, dropped.DisabledFeatures()) {
		return
	}
	if errors.As(err, &dropped) {
		// The API server dropped what it does not know: in mixed mode the
		// counters that keep a group and its members apart. Publishing on
		// would allow double allocation, so the plugin stops.
		err = fmt.Errorf("the API server dropped fields of the published slices (disabled features: %v); group mode %q needs DRAPartitionableDevices: run with --groups=none or exclusive: %w",
			dropped.DisabledFeatures(), p.cfg.Groups, err)
		klog.FromContext(ctx).Error(err, msg)
		p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "efakit stops: "+err.Error())
		p.withdrawAndStop(ctx, err)
		return
	}
	if numaListRefused(err) {
		// No DRAListTypeAttributes: 1.34 and 1.35 know no list values,
		// 1.36 and 1.37 drop them while the gate is off (its default),
		// and validation then finds numaNode without a value. The scalar
		// form says the same of an EFA, which has one NUMA node.
		p.mu.Lock()
		first := p.cfg.NUMAList && !p.publishing.numaScalar
		p.publishing.numaScalar = true
		p.mu.Unlock()
		if first {
			const why = "the API server refuses " + string(resources.AttrNUMANode) + " in list form (--numa-list needs DRAListTypeAttributes): published as a single number instead"
			klog.FromContext(ctx).Info("API server refuses numaNode lists", "then", why, "refused", err.Error())
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", why)
			p.askRescan(rescanAPI)
			return
		}
	}
	klog.FromContext(ctx).Error(err, msg)
	p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", msg+": "+err.Error())
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.ops.stop(fmt.Errorf("%s: %w", msg, err))
	}
}

// fallBack publishes without what the API server dropped, where efakit
// has a way to do without it, and reports whether every disabled feature
// was one of those: DRADeviceTaints (off by default on 1.34 and 1.35):
// unhealthy devices are left out of the slices instead of tainted;
// DRAConsumableCapacity (alpha, off by default, on 1.34 and 1.35): EFAs
// are published for one claim at a time instead of shared. Each is said
// once, and the next publish goes without it.
func (p *Plugin) fallBack(ctx context.Context, disabled []string) bool {
	flags := map[string]*bool{"DRADeviceTaints": &p.publishing.taintsDropped, "DRAConsumableCapacity": &p.publishing.sharingDropped}
	for _, f := range disabled {
		if _, ok := flags[f]; !ok {
			return false
		}
	}
	var first []string
	p.mu.Lock()
	for _, f := range disabled {
		if !*flags[f] {
			*flags[f] = true
			first = append(first, f)
		}
	}
	p.mu.Unlock()
	logger := klog.FromContext(ctx)
	for _, f := range first {
		switch f {
		case "DRADeviceTaints":
			logger.Info("API server drops device taints", "disabledFeature", f, "then", "unhealthy EFAs are withheld from the ResourceSlices instead of tainted")
		case "DRAConsumableCapacity":
			const why = "the API server drops allowMultipleAllocations and the shares' request policy (DRAConsumableCapacity is off): each EFA is published for one claim at a time, --sharing=capacity needs Kubernetes 1.36 or later"
			logger.Info("API server drops consumable capacity", "disabledFeature", f, "then", why)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", why)
		}
	}
	if len(first) > 0 {
		p.askRescan(rescanAPI)
	}
	return true
}

// withdrawAndStop stops the plugin on a fatal publishing error, after
// deleting its slices: as stored they are what made the error fatal. The
// withdrawal runs apart: the caller is the slice controller, which
// Withdraw stops and waits for.
func (p *Plugin) withdrawAndStop(ctx context.Context, err error) {
	p.mu.Lock()
	if p.publishing.stopping {
		// Each slice reports its drop: the first report stops.
		p.mu.Unlock()
		return
	}
	p.publishing.stopping = true
	pub := p.publishing.to
	p.publishing.to = nil // publish nothing more
	p.mu.Unlock()
	w, ok := pub.(withdrawer)
	if !ok {
		p.ops.stop(err)
		return
	}
	p.ops.spawn(func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if werr := w.Withdraw(wctx); werr != nil {
			klog.FromContext(ctx).Error(werr, "Withdrawing the slices before stopping failed")
		}
		p.ops.stop(err)
	})
}

// numaListRefused reports whether err is the API server refusing a slice
// for its numaNode attribute (the field path ends in
// attributes[resource.kubernetes.io/numaNode]).
func numaListRefused(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	if s.Reason != metav1.StatusReasonInvalid || s.Details == nil {
		return false
	}
	for _, c := range s.Details.Causes {
		if strings.HasSuffix(c.Field, ".attributes["+string(resources.AttrNUMANode)+"]") {
			return true
		}
	}
	return false
}

// WatchHealthStatus sends the health of every device now, then again on
// every health interval after a scan of sysfs (which Run makes), until
// ctx ends: a device that
// disappears, loses its driver, leaves ACTIVE or loses its uverbs node is
// reported Unhealthy.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(p.ops.healthInterval)
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
		}
		// The scan runs in Run, the one goroutine that writes the
		// inventory; the report waits for it, an interval at most.
		scanned := p.rescans.askWait(rescanHealth)
		select {
		case <-ctx.Done():
			return nil
		case <-scanned:
		case <-time.After(p.ops.healthInterval):
		}
	}
}

func (p *Plugin) healthReport() kubeletplugin.DeviceHealthReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	names := make([]string, 0, len(p.inv.health))
	for n := range p.inv.health {
		names = append(names, n)
	}
	sort.Strings(names)
	var r kubeletplugin.DeviceHealthReport
	for _, n := range names {
		h := p.inv.health[n]
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: p.cfg.NodeName, DeviceName: n, Health: h.status, Message: h.message,
			LastUpdated: now, HealthCheckTimeout: 3 * p.ops.healthInterval,
		})
	}
	return r
}

// healthChange is a device whose health changed in a scan: it turned
// unhealthy (or unhealthy for another reason), or healthy again.
type healthChange struct {
	device, rdma string
	now          deviceHealth
}

// healthChanges compares the health of a scan with the last one; p.mu is
// held. A device unhealthy at the first scan is a change; one healthy
// then is not.
func (p *Plugin) healthChanges(now map[string]deviceHealth, inv map[string]inventoryDevice) []healthChange {
	var out []healthChange
	for name, h := range now {
		was, known := p.inv.health[name]
		bad, wasBad := h.status == kubeletplugin.HealthStatusUnhealthy, known && was.status == kubeletplugin.HealthStatusUnhealthy
		if bad == wasBad && (!bad || was.message == h.message) {
			continue
		}
		if !bad && !known {
			continue
		}
		rdma := inv[name].RDMAName
		if rdma == "" {
			rdma = p.inv.devices[name].RDMAName
		}
		out = append(out, healthChange{device: name, rdma: rdma, now: h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].device < out[j].device })
	return out
}

// reportHealth logs each change of health once, and records it as an
// Event on the Node.
func (p *Plugin) reportHealth(ctx context.Context, changes []healthChange) {
	logger := klog.FromContext(ctx)
	for _, c := range changes {
		what := "EFA " + c.device
		if c.rdma != "" {
			what += " (" + c.rdma + ")"
		}
		if p.isGroup(c.device) {
			what = "EFA group " + c.device
		}
		if c.now.status == kubeletplugin.HealthStatusUnhealthy {
			msg := fmt.Sprintf("%s is unhealthy: %s; kept out of new allocations, allocated claims keep it", what, c.now.message)
			logger.Info("EFA unhealthy", "device", c.device, "rdmaDevice", c.rdma, "why", c.now.message)
			p.ops.events.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, c.device, msg)
			continue
		}
		logger.Info("EFA healthy again", "device", c.device, "rdmaDevice", c.rdma)
		p.ops.events.Record(corev1.EventTypeNormal, events.ReasonHealthy, c.device, what+" is healthy again")
	}
}

// isGroup tells a group device's name from an EFA's.
func (p *Plugin) isGroup(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isGroupLocked(name)
}
