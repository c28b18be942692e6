package driver

import (
	"sort"

	"github.com/efakit/efakit/driver/metrics"
)

// efaTargets lists the published EFAs with the claim each is prepared for
// (the group's claim for a member of a prepared group device). While the
// kubelet has yet to unprepare a claim whose EFA was handed on to another
// (see readClaim), the EFA carries the claim of lower UID: one series per
// EFA, so sums over claims or nodes count its traffic once.
func (p *Plugin) efaTargets() []metrics.Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	type owner struct{ ns, name, uid string }
	owners := map[string]owner{} // by PCI address
	if p.claims.state != nil {
		for uid, c := range p.claims.state.Claims {
			for _, d := range c.Devices {
				if o, ok := owners[d.PCIAddress]; !ok || uid < o.uid {
					owners[d.PCIAddress] = owner{c.Namespace, c.Name, uid}
				}
			}
		}
	}
	names := make([]string, 0, len(p.inv.devices))
	for n, inv := range p.inv.devices {
		if inv.EFA != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]metrics.Target, 0, len(names))
	for _, n := range names {
		inv := p.inv.devices[n]
		o := owners[inv.PCIAddress]
		out = append(out, metrics.Target{Dev: inv.EFA, Device: inv.RDMAName, PCIAddress: inv.PCIAddress, PCIeRoot: inv.EFA.PCI.Root,
			DRADevice: n, ClaimNamespace: o.ns, ClaimName: o.name, ClaimUID: o.uid})
	}
	return out
}
