package driver

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver/podresources"
)

// After the efa or ib_uverbs module is reloaded, the kernel numbers the
// uverbs devices anew: the number a prepared claim's containers were given
// (231:208, say) may belong to another EFA now. A container that restarts
// gets its devices from the claim's CDI spec again, so the spec must
// follow the renumbering as soon as the plugin sees it (a scan: the
// kernel's uevents within a second, the health checks every
// --health-interval), not at the plugin's next start. Containers started
// before keep the old number until they restart; the plugin keeps that
// number held by the claim (no other claim is given it) until the claim is
// unprepared, and names the pods that still run with it.

// ReasonRenumbered is the Event reason, on the Node, of an EFA of a
// prepared claim found renumbered.
const ReasonRenumbered = "EFARenumbered"

// claimRenumbered is a prepared claim with its EFAs that were renumbered.
type claimRenumbered struct {
	UID, Namespace, Name string
	Devices              []renumbering
}

// renumberedSince tells whether an EFA of a prepared claim has, in the
// inventory of the last scan, another RDMA name or uverbs device than the
// claim's record. Called with p.mu held.
func (p *Plugin) renumberedSince() bool {
	for _, c := range p.state.Claims {
		for _, d := range c.Devices {
			inv, ok := p.inventory[d.Device]
			if !ok || inv.EFA == nil {
				continue // gone, or no uverbs device: health says so
			}
			if inv.RDMAName != d.RDMAName || inv.Uverbs != d.Uverbs || inv.Major != d.Major || inv.Minor != d.Minor {
				return true
			}
		}
	}
	return false
}

// correctRenumbered corrects the specs of prepared claims after a scan
// found EFAs renumbered (RepairSpecs: under the helper's lock, from the
// checkpoint as it is now).
func (p *Plugin) correctRenumbered(ctx context.Context) {
	if err := p.RepairSpecs(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Correcting the CDI specs of renumbered EFAs")
	}
}

// reportRenumbered records, for each claim, an Event on the Node that
// names its renumbered EFAs and the pods that use the claim (from the
// kubelet): their containers that started before hold the old numbers.
func (p *Plugin) reportRenumbered(ctx context.Context, claims []claimRenumbered) {
	if len(claims) == 0 {
		return
	}
	var pods []podresources.Pod
	if p.pods != nil {
		var err error
		if pods, err = p.pods.List(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Listing the pods that use renumbered EFAs")
		}
	}
	for _, c := range claims {
		var moves []string
		for _, d := range c.Devices {
			moves = append(moves, fmt.Sprintf("%s was %s, is %s", d.Device, d.Was, d.Now))
		}
		users := podresources.Using(pods, c.Namespace, c.Name)
		who := "pods that use it"
		if len(users) > 0 {
			who = "pods " + strings.Join(users, ", ")
		}
		klog.FromContext(ctx).Info("Pods run with device numbers of a renumbered EFA", "claim", klog.KRef(c.Namespace, c.Name), "pods", users)
		p.Events.record(corev1.EventTypeWarning, ReasonRenumbered, c.UID, fmt.Sprintf(
			"EFAs of claim %s/%s renumbered (efa or ib_uverbs module reloaded?): %s. Its CDI spec is corrected for containers that start from now on; containers of %s that started before hold the old numbers, which may reach another EFA, until they restart. The old numbers stay held until the claim is unprepared.",
			c.Namespace, c.Name, strings.Join(moves, "; "), who))
	}
}

// claimUsers says which pods use a claim, for a message: " (pods a, b)",
// or "" when the kubelet does not say. It asks the kubelet: only for a
// refusal, never on a prepare that succeeds.
func (p *Plugin) claimUsers(ctx context.Context, namespace, name string) string {
	if p.pods == nil {
		return ""
	}
	pods, err := p.pods.List(ctx)
	if err != nil {
		return ""
	}
	users := podresources.Using(pods, namespace, name)
	if len(users) == 0 {
		return ""
	}
	return " (pods " + strings.Join(users, ", ") + ")"
}
