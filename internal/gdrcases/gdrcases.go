// Package gdrcases builds the small sysfs trees of the GPUDirect cases
// efakit judges: one GPU and one EFA, in the layout NVIDIA/aicr measured on
// a P6e node or in a p5 switch, with the driver files of each case.
package gdrcases

import (
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/pcie"
)

// Machine is one GPU and one EFA, in one of two layouts:
//   - apart (P6e as NVIDIA/aicr measured a p6e-gb300r): the EFA 0000:97:00.0
//     behind root port 84:00.0, the GPU 0000:9d:00.0 behind root port
//     98:00.0, on two root complexes;
//   - shared (p5's switch): root port 44:00.0, switch 45:00.0, the EFA
//     4f:00.0 on port 46:01.0 and the GPU 53:00.0 on port 46:01.4.
type Machine struct {
	Product   string    // the DMI product name; "" for none
	Shared    bool      // the shared layout; the apart one otherwise
	GPUID     uint16    // 10de:2330 by default
	GPUDriver string    // "nvidia" by default; "-" for none
	EFAID     uint16    // 1d0f:efa1 by default
	NoGroup   bool      // the EFA in no IOMMU group
	P2P       string    // the p2p file; "" leaves it out
	EmptyP2P  bool      // a p2p file that names no provider
	GDR       string    // the gdr file; "" leaves it out
	EFAModule string    // module/efa/version; "" for the in-tree driver
	NVIDIA    string    // module/nvidia/version; "" leaves it out
	ACS       *pcie.ACS // on every bridge; nil for none
	HideACS   bool      // config files as an unprivileged reader sees them
}

// Build returns the tree.
func (m Machine) Build() *fakesys.Builder {
	b := fakesys.New()
	if m.Product != "" {
		b.Product(m.Product)
	}
	gpuID, efaID, driver := m.GPUID, m.EFAID, m.GPUDriver
	if gpuID == 0 {
		gpuID = 0x2330
	}
	if efaID == 0 {
		efaID = 0xefa1
	}
	switch driver {
	case "":
		driver = "nvidia"
	case "-":
		driver = ""
	}
	bridge := func(addr, parent string) {
		b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, Driver: "pcieport", NUMA: 0})
		cfg := fakesys.ExpressConfig(0x1d0f, 0x0200, m.ACS)
		if m.HideACS {
			cfg = cfg[:pcie.ConfigUnprivileged]
		}
		b.Config(addr, cfg)
	}
	gpuAddr, efaAddr := "0000:9d:00.0", "0000:97:00.0"
	gpuParent, efaParent := "0000:98:00.0", "0000:84:00.0"
	if m.Shared {
		gpuAddr, efaAddr = "0000:53:00.0", "0000:4f:00.0"
		gpuParent, efaParent = "0000:46:01.4", "0000:46:01.0"
		bridge("0000:44:00.0", "")
		bridge("0000:45:00.0", "0000:44:00.0")
		bridge("0000:46:01.0", "0000:45:00.0")
		bridge("0000:46:01.4", "0000:45:00.0")
	} else {
		bridge("0000:84:00.0", "")
		bridge("0000:98:00.0", "")
	}
	// The GPU first: IOMMU group 0, as measured.
	b.AddPCI(fakesys.PCI{Addr: gpuAddr, Parent: gpuParent, Vendor: 0x10de, Device: gpuID, Class: 0x030200, Driver: driver, NUMA: 0})
	dir := b.AddPCI(fakesys.PCI{Addr: efaAddr, Parent: efaParent, Vendor: 0x1d0f, Device: efaID, Class: 0x020000, Driver: "efa", NUMA: 0})
	b.AddEFA(fakesys.EFA{Addr: efaAddr, IBName: "rdmap151s0", Rate: "400 Gb/sec (8X HDR)", NodeGUID: "0000:0000:0000:0001", P2P: m.P2P})
	if m.EmptyP2P {
		b.Attr(dir+"/p2p", "")
	}
	if m.NoGroup {
		b.Remove(dir + "/iommu_group")
	}
	if m.GDR != "" {
		b.Attr(dir+"/gdr", m.GDR)
	}
	if m.EFAModule != "" {
		b.Attr("module/efa/version", m.EFAModule)
	}
	if m.NVIDIA != "" {
		b.Attr("module/nvidia/version", m.NVIDIA)
	}
	return b
}
