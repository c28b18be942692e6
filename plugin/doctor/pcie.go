package doctor

import (
	"fmt"
	"strings"

	"github.com/efakit/efakit/pcie"
)

// fixPCIeLink is the fix for a link that trained below its maximum: the
// instance cannot retrain it, so move to other hardware.
const fixPCIeLink = "a link below its maximum cuts the device's bandwidth: stop and start the instance to move it to another host, and report the instance ID to AWS Support if it comes back"

// pcieLinks checks that every EFA's and GPU's PCIe link runs at its
// maximum speed and width (current_link_* against max_link_*). What IOMMU
// groups mean for GPUDirect is the gpudirect check's.
func (f *facts) pcieLinks() Check {
	type fn struct {
		label string
		pci   *pcie.Device
	}
	var fns []fn
	for _, d := range f.efas {
		fns = append(fns, fn{d.Name, d.PCI})
	}
	for _, g := range f.gpus {
		fns = append(fns, fn{"GPU " + g.Address.String(), g})
	}
	if len(fns) == 0 {
		return Check{ID: CheckPCIeLinks, Status: Skip, Message: "no EFA or GPU in sysfs"}
	}
	var below, atMax []string
	for _, x := range fns {
		cur, max := x.pci.CurrentLink, x.pci.MaxLink
		if cur == nil || max == nil {
			continue
		}
		if cur.Below(*max) {
			below = append(below, fmt.Sprintf("%s %s of %s", x.label, cur, max))
		} else {
			atMax = append(atMax, x.label)
		}
	}
	var parts []part
	switch {
	case len(below) > 0:
		parts = append(parts, part{Warn, fmt.Sprintf("%s below the maximum: %s", plural(len(below), "link"), listNames(below, maxListed)), fixPCIeLink})
		if len(atMax) > 0 {
			parts = append(parts, part{Pass, fmt.Sprintf("%d at the maximum", len(atMax)), ""})
		}
	case len(atMax) > 0:
		parts = append(parts, part{Pass, fmt.Sprintf("%s of %s at the maximum speed and width", plural(len(atMax), "link"), count(f)), ""})
	default:
		parts = append(parts, part{Skip, fmt.Sprintf("no PCIe link files on the %s (not PCI Express, or a capture without them)", count(f)), ""})
	}
	return combine(CheckPCIeLinks, parts...)
}

// count says how many EFAs and GPUs the check looked at: "32 EFAs and 8
// GPUs".
func count(f *facts) string {
	var s []string
	if len(f.efas) > 0 {
		s = append(s, plural(len(f.efas), "EFA"))
	}
	if len(f.gpus) > 0 {
		s = append(s, plural(len(f.gpus), "GPU"))
	}
	return strings.Join(s, " and ")
}
