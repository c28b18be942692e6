package machines

import (
	"fmt"
	"strconv"
	"strings"
)

// efaModuleVersion is module/efa/version in fixtures with the out-of-tree
// efa driver (those with a p2p file, which drivers from 2.6.0 print:
// amzn-drivers commit cf3152e): a release of amzn-drivers'
// kernel/linux/efa/RELEASENOTES.md (r2.13.0), in the form
// DRV_MODULE_VERSION prints ("g" suffix). Which release the real machines
// ran is not known [inf].
const efaModuleVersion = "2.13.0g"

// pcieLink is the link a fixture gives a function, current equal to max:
// the speed as Linux 5.2 and later print it, and the width. ok is false
// for functions given no link files.
func pcieLink(r role, device uint16) (speed string, width int, ok bool) {
	switch r {
	case roleGPU:
		switch device {
		case 0x20b0, 0x20b2, 0x2237, 0x26b9, 0x27b8: // A100, A10G, L40S, L4: PCIe 4.0
			return "16.0 GT/s PCIe", 16, true
		}
		return "32.0 GT/s PCIe", 16, true // H100 and later: PCIe 5.0
	case roleEFA:
		// The slowest generation whose x16 link carries the EFA's port
		// rate: 100 Gb/s (efa0, efa1), 200 (efa2), 400 (efa3).
		switch device {
		case 0xefa0, 0xefa1:
			return "8.0 GT/s PCIe", 16, true
		case 0xefa2:
			return "16.0 GT/s PCIe", 16, true
		}
		return "32.0 GT/s PCIe", 16, true
	case roleNeuron:
		if device == 0x7164 { // Trainium1
			return "16.0 GT/s PCIe", 16, true
		}
		return "32.0 GT/s PCIe", 16, true
	case roleMLX5: // ConnectX-7: PCIe 5.0 x16
		return "32.0 GT/s PCIe", 16, true
	}
	return "", 0, false
}

// deviceFiles adds a function's link files where pcieLink gives it a link.
// Its iommu_group link is fakesys's.
func (m *machine) deviceFiles(dir string, r role, device uint16) {
	speed, width, ok := pcieLink(r, device)
	if !ok {
		return
	}
	for _, p := range []string{"current", "max"} {
		m.Attr(dir+"/"+p+"_link_speed", speed)
		m.Attr(dir+"/"+p+"_link_width", strconv.Itoa(width))
	}
}

// efaModule adds module/efa/version for a fixture with the out-of-tree
// driver; the in-tree one sets no version.
func (m *machine) efaModule() {
	if m.p2p != "" {
		m.Attr("module/efa/version", efaModuleVersion)
	}
}

// noteDeviceFiles says where the link files and the module version come
// from.
func (m *machine) noteDeviceFiles() {
	var links []string
	for _, r := range []role{roleGPU, roleEFA, roleNeuron, roleMLX5} {
		for _, id := range m.held[r].ids {
			var dev uint16
			if _, err := fmt.Sscanf(id[5:], "%04x", &dev); err != nil {
				panic("fixturegen: bad ID " + id)
			}
			speed, width, _ := pcieLink(r, dev)
			links = append(links, fmt.Sprintf("%s %s x%d", id, strings.TrimSuffix(speed, " PCIe"), width))
		}
	}
	if len(links) > 0 {
		m.Inf("PCIe links (current_link_* equal to max_link_*): %s, from each part's PCIe generation (an EFA: the slowest whose x16 link carries its port rate); no link files on other functions", strings.Join(links, ", "))
	}
	if m.p2p != "" {
		m.Inf("out-of-tree efa driver: module/efa/version %q, no gdr file (2.6.0 and later print p2p instead)", efaModuleVersion)
	}
}
