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
			cfg = cfg[:64 /* what an unprivileged reader sees */]
		}
		b.Config(addr, cfg)
	}
	gpuAddr, efaAddr, ibName := "0000:9d:00.0", "0000:97:00.0", "rdmap151s0"
	gpuParent, efaParent := "0000:98:00.0", "0000:84:00.0"
	if m.Shared {
		gpuAddr, efaAddr, ibName = "0000:53:00.0", "0000:4f:00.0", "rdmap79s0"
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
	b.AddEFA(fakesys.EFA{Addr: efaAddr, IBName: ibName, Rate: "400 Gb/sec (8X HDR)", NodeGUID: "0000:0000:0000:0001", P2P: m.P2P})
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

// Kernel releases of the cases' proc roots.
const (
	KernelAL2023ARM = "6.1.119-129.201.amzn2023.aarch64"
	KernelAL2023    = "6.1.119-129.201.amzn2023.x86_64"
	KernelAL2       = "5.10.228-219.884.amzn2.x86_64"
)

// The nvidia module's params file in part: the lines of the R580 and R595
// branches around the parameter efakit reads.
const (
	ParamsR580         = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRegistryDwords: \"\"\nGrdmaPciTopoCheckOverride: 0\n"
	ParamsR580Override = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRegistryDwords: \"\"\nGrdmaPciTopoCheckOverride: 1\n"
	ParamsR595         = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRegistryDwords: \"\"\n"
)

// Case is one GPUDirect case as a fixture: the machine, its proc files and
// the pair's status efakit gives it.
type Case struct {
	Name    string
	About   string // what the case is, and where it comes from
	Machine Machine
	Kernel  string // proc sys/kernel/osrelease; "" for none
	Params  string // proc driver/nvidia/params; "" for none
	Want    string // the pair's status: ready, slow, unknown or blocked
}

// Cases are the fixtures of testdata/gpudirect: each blocking case, the
// fix beside the P6e ones, and a ready and a slow pair.
func Cases() []Case {
	p6e := Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g", NVIDIA: "595.91.07"}
	p5 := Machine{Product: "p5.48xlarge", Shared: true, P2P: "NVIDIA", EFAModule: "2.13.0g", NVIDIA: "580.105.08", ACS: &pcie.ACS{Capability: 0x5f}}
	with := func(m Machine, edit func(*Machine)) Machine { edit(&m); return m }
	return []Case{
		{"p6e-gb300r-r595", "P6e as NVIDIA/aicr measured it (EFA 0000:97:00.0 in no IOMMU group under pci0000:84, GPU 0000:9d:00.0 in group 0 under pci0000:98) on the R595 driver: no rule lets the EFA attach the GPU's dma-buf",
			p6e, KernelAL2023ARM, ParamsR595, "blocked"},
		{"p6e-gb300r-r580", "the same P6e pair on R580 without NVreg_GrdmaPciTopoCheckOverride=1",
			with(p6e, func(m *Machine) { m.NVIDIA = "580.173.02" }), KernelAL2023ARM, ParamsR580, "blocked"},
		{"p6e-gb300r-r580-override", "the same P6e pair on R580 with NVreg_GrdmaPciTopoCheckOverride=1: ready by dma-buf",
			with(p6e, func(m *Machine) { m.NVIDIA = "580.173.02" }), KernelAL2023ARM, ParamsR580Override, "ready"},
		{"p5-in-tree-efa-al2", "a p5 switch with the in-tree efa driver (no peer-memory path) on Amazon Linux 2's kernel 5.10 (no dma-buf import)",
			with(p5, func(m *Machine) { m.P2P, m.EFAModule = "", "" }), KernelAL2, ParamsR580, "blocked"},
		{"p5-no-nvidia-provider-al2", "a p5 switch whose out-of-tree efa driver found no NVIDIA peer-memory provider (an empty p2p file), on kernel 5.10",
			with(p5, func(m *Machine) { m.P2P, m.EmptyP2P = "", true }), KernelAL2, ParamsR580, "blocked"},
		{"p5-gpu-unbound", "a p5 switch whose GPU no driver holds",
			with(p5, func(m *Machine) { m.GPUDriver = "-" }), KernelAL2023, "", "blocked"},
		{"p5-acs-redirect", "a p5 switch whose ports redirect peer-to-peer requests and completions to the root complex: ready, slow",
			with(p5, func(m *Machine) {
				m.ACS = &pcie.ACS{Capability: 0x5f, Control: 0x1d} // SrcValid ReqRedir CmpltRedir UpstreamFwd
			}), KernelAL2023, ParamsR580, "slow"},
		{"p5-ready", "a p5 switch ready by both paths: the efa driver's NVIDIA provider, kernel 6.1, ACS off",
			p5, KernelAL2023, ParamsR580, "ready"},
	}
}
