// Package placed scans a machine leanly, for the callers that read it
// again and again (the plugin's health checks, every ten seconds) or show
// only part of it: of the PCI functions, only those the topology places
// (GPUs, Neuron devices, EFAs) get their optional attributes read, and
// their PCIe links only where asked (the kernel reads a link's speed from
// config space, a trap in a virtual machine); of the EFAs, the gdr file
// GPUDirect readiness needs; of the Neuron class devices, which exist.
// topology.Scan, the public one, reads every attribute of every device.
package placed

import (
	"io/fs"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// Lean is what a lean pass reads: the placed functions' NUMA node, local
// CPUs and IOMMU group (what the standard attributes, the alignment
// answers and GPUDirect readiness use), with links too; the EFAs' gdr file.
func Lean(links bool) sysread.Lean {
	bits := sysread.PCINUMANode | sysread.PCILocalCPUs | sysread.PCIIOMMU
	if links {
		bits |= sysread.PCILink
	}
	return sysread.Lean{
		PCI: func(vendor, device uint16, class uint32, driver string) uint8 {
			d := &pcie.Device{Vendor: vendor, Device: device, Class: pcie.Class(class), Driver: driver}
			if topology.IsGPU(d) || neuron.IsNeuron(d) || efa.IsEFA(d) {
				return bits
			}
			return 0
		},
		EFA: sysread.EFAGDR,
	}
}

// Scan is topology.Scan of a lean pass (Lean).
func Scan(fsys fs.FS, links bool) (*topology.Topology, error) {
	return topology.Scan(sysread.NewLean(fsys, Lean(links)))
}
