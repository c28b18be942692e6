package sysread

import "io/fs"

// The optional attributes a pass may leave unread, as bits, by reader: a
// PCI function's (pcie), an EFA's (efa), a Neuron class device's (neuron).
// The public entry points read all of them; a lean pass (NewLean) reads
// those its Lean says, for callers that read a machine again and again
// (the plugin's health checks) and want no attribute they do not use, such
// as a PCIe link's speed, which the kernel reads from config space.
const (
	PCIRevision uint8 = 1 << iota
	PCINUMANode
	PCILocalCPUs
	PCILink
	PCIIOMMU
	PCIAll = PCIRevision | PCINUMANode | PCILocalCPUs | PCILink | PCIIOMMU
)

// An EFA's optional attributes.
const (
	EFASysImageGUID uint8 = 1 << iota
	EFAFirmwareVer
	EFAGDR
	EFAAll = EFASysImageGUID | EFAFirmwareVer | EFAGDR
)

// A Neuron class device's optional attributes.
const (
	NeuronCoreCount uint8 = 1 << iota
	NeuronConnected
	NeuronArch
	NeuronAll = NeuronCoreCount | NeuronConnected | NeuronArch
)

// Lean is what a lean pass reads of the optional attributes.
type Lean struct {
	// PCI gives a function's bits from its IDs, class and driver; nil
	// reads none.
	PCI func(vendor, device uint16, class uint32, driver string) uint8
	// EFA and Neuron are the bits of every EFA and Neuron class device.
	EFA, Neuron uint8
}

// NewLean returns a Reader of fsys whose passes read the optional
// attributes l says; the others keep their unknown values.
func NewLean(fsys fs.FS, l Lean) *Reader {
	r := New(fsys)
	if r == fsys {
		c := *r // the same caches, another pass's choice
		r = &c
	}
	r.lean = &l
	return r
}

// Lean is what the pass reads of the optional attributes; nil: all.
func (r *Reader) Lean() *Lean { return r.lean }
