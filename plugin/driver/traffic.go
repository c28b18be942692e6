package driver

import (
	"context"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/traffic"
)

// observeTraffic gives the traffic tracker the prepared claims and the
// counters this scan read, and says each device that turned idle or busy
// again: a log line, an Event on its claim, the idle-claims metric.
func (p *Plugin) observeTraffic(ctx context.Context, now time.Time, read map[string]*efa.Counters) {
	t := p.ops.traffic
	if t.IdleAfter() <= 0 {
		return
	}
	changes, err := t.Observe(now, trafficClaims(p.claims.Committed()), read)
	logger := klog.FromContext(ctx)
	if err != nil {
		logger.Error(err, "Keeping the claims' traffic state", "then", "a restart judges them from then on")
	}
	for _, c := range changes {
		if c.Idle {
			logger.Info("No RDMA traffic", "claim", klog.KRef(c.Claim.Namespace, c.Claim.Name), "device", c.Device.Name, "efas", c.Device.RDMA, "since", c.Since)
			p.ops.events.RecordClaim(corev1.EventTypeWarning, events.ReasonNoTraffic, c.Claim.Namespace, c.Claim.Name, c.Claim.UID, c.Device.Name, c.Message)
			continue
		}
		logger.Info("RDMA traffic again", "claim", klog.KRef(c.Claim.Namespace, c.Claim.Name), "device", c.Device.Name, "efas", c.Device.RDMA)
		p.ops.events.RecordClaim(corev1.EventTypeNormal, events.ReasonTraffic, c.Claim.Namespace, c.Claim.Name, c.Claim.UID, c.Device.Name, c.Message)
	}
	p.ops.metrics.Health.IdleClaims.Set(float64(t.IdleClaims()))
}

// trafficClaims are the prepared claims as the traffic tracker sees them:
// each allocated device (a group once, a shared EFA once per share) with
// its EFAs.
func trafficClaims(st *checkpoint.State) []traffic.Claim {
	out := make([]traffic.Claim, 0, len(st.Claims))
	for _, c := range st.Claims {
		tc := traffic.Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
		for _, a := range c.Allocated() {
			dev := traffic.Device{Name: a.Name, ShareID: a.ShareID}
			for _, d := range a.EFAs {
				dev.PCI = append(dev.PCI, d.PCIAddress)
				dev.RDMA = append(dev.RDMA, d.RDMAName)
			}
			tc.Devices = append(tc.Devices, dev)
		}
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}
