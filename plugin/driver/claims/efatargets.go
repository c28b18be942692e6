package claims

import (
	"slices"
	"sort"
	"strings"

	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/metrics"
)

// Targets lists the published EFAs with the claim each is prepared for
// (the group's claim for a member of a prepared group device). An EFA
// shared by capacity carries every claim that holds a share of it, each
// label a comma-separated list in UID order. While the kubelet has yet to
// unprepare a claim whose EFA was handed on to another (see readClaim),
// the EFA carries the claim of lower UID. One series per EFA either way,
// so sums over claims or nodes count its traffic once.
//
// It reads the claim state last saved and the inventory snap, never the
// lock: a scrape does not wait behind a prepare's fsync.
func (s *State) Targets(snap *inventory.Snapshot) []metrics.Target {
	state := s.Committed()
	devices := snap.Devices
	type owner struct{ ns, name, uid string }
	owners := map[string]owner{}   // by PCI address: the claim holding it alone
	shares := map[string][]owner{} // by PCI address: the claims holding shares
	if state != nil {
		for uid, c := range state.Claims {
			for _, d := range c.Devices {
				if d.ShareID != "" {
					o := owner{c.Namespace, c.Name, uid}
					if !slices.Contains(shares[d.PCIAddress], o) {
						shares[d.PCIAddress] = append(shares[d.PCIAddress], o)
					}
					continue
				}
				if o, ok := owners[d.PCIAddress]; !ok || uid < o.uid {
					owners[d.PCIAddress] = owner{c.Namespace, c.Name, uid}
				}
			}
		}
	}
	for pci, holders := range shares {
		if _, alone := owners[pci]; alone {
			continue
		}
		slices.SortFunc(holders, func(a, b owner) int { return strings.Compare(a.uid, b.uid) })
		var o [3][]string
		for _, s := range holders {
			o[0], o[1], o[2] = append(o[0], s.ns), append(o[1], s.name), append(o[2], s.uid)
		}
		owners[pci] = owner{strings.Join(o[0], ","), strings.Join(o[1], ","), strings.Join(o[2], ",")}
	}
	names := make([]string, 0, len(devices))
	for n, inv := range devices {
		if inv.EFA != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]metrics.Target, 0, len(names))
	for _, n := range names {
		inv := devices[n]
		o := owners[inv.PCIAddress]
		out = append(out, metrics.Target{Dev: inv.EFA, Device: inv.RDMAName, PCIAddress: inv.PCIAddress, PCIeRoot: inv.EFA.PCI.Root,
			DRADevice: n, ClaimNamespace: o.ns, ClaimName: o.name, ClaimUID: o.uid})
	}
	return out
}
