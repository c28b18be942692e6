package publishing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// HandleError logs background errors (publishing); a fatal one stops the
// plugin through Stop.
func (p *Publisher) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && p.fallBack(ctx, dropped.DisabledFeatures()) {
		return
	}
	if errors.As(err, &dropped) {
		// The API server dropped what it does not know: in mixed mode the
		// counters that keep a group and its members apart. Publishing on
		// would allow double allocation, so the plugin stops.
		err = fmt.Errorf("the API server dropped fields of the published slices (disabled features: %v); group mode %q needs DRAPartitionableDevices: run with --groups=none or exclusive: %w",
			dropped.DisabledFeatures(), p.opts.Config.Groups, err)
		klog.FromContext(ctx).Error(err, msg)
		p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", "efakit stops: "+err.Error())
		p.withdrawAndStop(ctx, err)
		return
	}
	if numaListRefused(err) {
		// No DRAListTypeAttributes: 1.34 and 1.35 know no list values,
		// 1.36 and 1.37 drop them while the gate is off (its default),
		// and validation then finds numaNode without a value. The scalar
		// form says the same of an EFA, which has one NUMA node.
		p.mu.Lock()
		first := p.opts.Config.NUMAList && !p.refused.NUMAList
		p.refused.NUMAList = true
		p.mu.Unlock()
		if first {
			const why = "the API server refuses " + string(resources.AttrNUMANode) + " in list form (--numa-list needs DRAListTypeAttributes): published as a single number instead"
			klog.FromContext(ctx).Info("API server refuses numaNode lists", "then", why, "refused", err.Error())
			p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", why)
			p.opts.AskRescan()
			return
		}
	}
	if noneEffectRefused(err) {
		// An API server from before the effect None refuses the taints
		// that mark degraded devices: they are published unmarked, their
		// grade said by the kubelet's report, the claims' status, Events
		// and metrics.
		p.mu.Lock()
		first := !p.refused.NoneEffect
		p.refused.NoneEffect = true
		p.mu.Unlock()
		if first {
			const why = "the API server refuses device taints of effect None: degraded EFAs are published without their taint (their grade is in the claims' status, the kubelet's health report, Events and metrics)"
			klog.FromContext(ctx).Info("API server refuses the taint effect None", "then", why, "refused", err.Error())
			p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", why)
			p.opts.AskRescan()
			return
		}
	}
	klog.FromContext(ctx).Error(err, msg)
	p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", msg+": "+err.Error())
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.opts.Stop(fmt.Errorf("%s: %w", msg, err))
	}
}

// fallBack publishes without what the API server dropped, where efakit
// has a way to do without it, and reports whether every disabled feature
// was one of those: DRADeviceTaints (off by default on 1.34 and 1.35):
// unhealthy devices are left out of the slices instead of tainted;
// DRAConsumableCapacity (alpha, off by default, on 1.34 and 1.35): EFAs
// are published for one claim at a time instead of shared. Each is said
// once, and the next publish goes without it.
func (p *Publisher) fallBack(ctx context.Context, disabled []string) bool {
	flags := map[string]*bool{"DRADeviceTaints": &p.refused.Taints, "DRAConsumableCapacity": &p.refused.Sharing}
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
			p.opts.Events.Record(corev1.EventTypeWarning, events.ReasonPublishFailed, "", why)
		}
	}
	if len(first) > 0 {
		p.opts.AskRescan()
	}
	return true
}

// withdrawAndStop stops the plugin on a fatal publishing error, after
// deleting its slices: as stored they are what made the error fatal. The
// withdrawal runs apart: the caller is the slice controller, which
// Withdraw stops and waits for.
func (p *Publisher) withdrawAndStop(ctx context.Context, err error) {
	p.mu.Lock()
	if p.stopping {
		// Each slice reports its drop: the first report stops.
		p.mu.Unlock()
		return
	}
	p.stopping = true
	pub := p.to
	p.to = nil // publish nothing more
	p.mu.Unlock()
	w, ok := pub.(withdrawer)
	if !ok {
		p.opts.Stop(err)
		return
	}
	p.opts.Spawn(func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if werr := w.Withdraw(wctx); werr != nil {
			klog.FromContext(ctx).Error(werr, "Withdrawing the slices before stopping failed")
		}
		p.opts.Stop(err)
	})
}

// numaListRefused reports whether err is the API server refusing a slice
// for its numaNode attribute (the field path ends in
// attributes[resource.kubernetes.io/numaNode]).
func numaListRefused(err error) bool {
	return invalidFor(err, func(c metav1.StatusCause) bool {
		return strings.HasSuffix(c.Field, ".attributes["+string(resources.AttrNUMANode)+"]")
	})
}

// noneEffectRefused reports whether err is the API server refusing a
// slice for a device taint of effect None (a field path that ends in
// .taints[n].effect, the value None not supported).
func noneEffectRefused(err error) bool {
	return invalidFor(err, func(c metav1.StatusCause) bool {
		return strings.Contains(c.Field, ".taints[") && strings.HasSuffix(c.Field, "].effect") && strings.Contains(c.Message, `"None"`)
	})
}

// invalidFor reports whether err is the API server refusing an object as
// invalid for a cause that match accepts.
func invalidFor(err error, match func(metav1.StatusCause) bool) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	if s.Reason != metav1.StatusReasonInvalid || s.Details == nil {
		return false
	}
	return slices.ContainsFunc(s.Details.Causes, match)
}
