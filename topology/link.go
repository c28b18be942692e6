package topology

import (
	"slices"

	"github.com/efakit/efakit/pcie"
)

// Link is how two devices are connected, in the classes of
// `nvidia-smi topo -m`, best first.
type Link int

// The link classes, from the closest to the farthest.
const (
	// LinkSelf: the same device.
	LinkSelf Link = iota
	// LinkPIX: through at most one PCIe bridge (the same switch port).
	LinkPIX
	// LinkPXB: through several PCIe bridges, without the host bridge
	// (the same PCIe switch).
	LinkPXB
	// LinkPHB: through a PCIe host bridge (the same root complex).
	LinkPHB
	// LinkNode: between root complexes of one NUMA node.
	LinkNode
	// LinkSys: between NUMA nodes, across the SMP interconnect.
	LinkSys
	// LinkUnknown: a device without a known PCI function.
	LinkUnknown
)

var linkNames = [...]string{"SELF", "PIX", "PXB", "PHB", "NODE", "SYS", "?"}

func (l Link) String() string { return linkNames[l] }

// MarshalText prints String.
func (l Link) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// LinkLegend explains each class, as nvidia-smi's legend does.
var LinkLegend = []struct{ Link, Meaning string }{
	{"SELF", "the same device"},
	{"PIX", "through at most one PCIe bridge (one switch port)"},
	{"PXB", "through several PCIe bridges below the host bridge (one PCIe switch)"},
	{"PHB", "through a PCIe host bridge (one root complex)"},
	{"NODE", "between the PCIe host bridges of one NUMA node"},
	{"SYS", "between NUMA nodes, across the CPU interconnect"},
}

// Link returns the class of the connection between a and b, from the PCI
// tree and the NUMA nodes. Two root complexes whose NUMA node is unknown
// count as one node (a machine without NUMA information has one).
func (t *Topology) Link(a, b *Device) Link {
	if a == b {
		return LinkSelf
	}
	if a.PCI == nil || b.PCI == nil {
		return LinkUnknown
	}
	return PCILink(a.PCI, b.PCI)
}

// PCILink is Link for two PCI functions.
func PCILink(a, b *pcie.Device) Link {
	if a == b {
		return LinkSelf
	}
	if a.Root != b.Root {
		if a.NUMANode >= 0 && b.NUMANode >= 0 && a.NUMANode != b.NUMANode {
			return LinkSys
		}
		return LinkNode
	}
	ca, cb := a.Bridges(), b.Bridges()
	common := 0
	for common < len(ca) && common < len(cb) && ca[common] == cb[common] {
		common++
	}
	if common == 0 {
		return LinkPHB
	}
	// The bridges on the way: the nearest common one, and those below it
	// on either side.
	if (len(ca)-common)+(len(cb)-common)+1 <= 1 {
		return LinkPIX
	}
	return LinkPXB
}

// Closest returns the devices of the other side closest to d: for an EFA
// the accelerators, for an accelerator the EFAs. Closest means the best
// link class; on a Trainium machine with a family table, the table's
// Neuron-EFA attachment is the ground truth (trn1's roots are flat, so
// the PCI tree alone puts four Neuron devices at the same distance from
// each EFA).
func (t *Topology) Closest(d *Device) []*Device {
	var cands []*Device
	for _, o := range t.Devices {
		if o != d && o.IsAccelerator() != d.IsAccelerator() {
			cands = append(cands, o)
		}
	}
	if t.Table != nil && (d.Kind == KindNeuron || d.Kind == KindEFA) {
		var out []*Device
		for _, o := range cands {
			if o.Kind != KindNeuron && d.Kind != KindNeuron {
				continue
			}
			n, e := d, o
			if d.Kind == KindEFA {
				n, e = o, d
			}
			if n.NeuronIndex >= 0 && e.PCI != nil {
				if a, ok := t.Table.NeuronEFA[n.NeuronIndex]; ok && a == e.PCI.Address {
					out = append(out, o)
				}
			}
		}
		if len(out) > 0 || d.Kind == KindNeuron {
			return out
		}
	}
	best := LinkUnknown
	var out []*Device
	for _, o := range cands {
		l := t.Link(d, o)
		switch {
		case l < best:
			best, out = l, []*Device{o}
		case l == best && l != LinkUnknown:
			out = append(out, o)
		}
	}
	return out
}

// Standard are the standard DRA attributes of a device
// (k8s.io/dynamic-resource-allocation/deviceattribute), with the values
// that package computes from the same sysfs.
type Standard struct {
	// PCIeRoot is resource.kubernetes.io/pcieRoot, "pci0000:44".
	PCIeRoot string `json:"pcieRoot"`
	// PCIBusID is resource.kubernetes.io/pciBusID, "0000:4f:00.0".
	PCIBusID string `json:"pciBusID"`
	// NUMANode is resource.kubernetes.io/numaNode in scalar form; nil
	// where the kernel says -1, and then the attribute is not published.
	NUMANode *int `json:"numaNode"`
	// NUMANodes is the list form (DRAListTypeAttributes): the device's
	// node first, then the nodes of the same socket at the smallest
	// distance.
	NUMANodes []int `json:"numaNodes,omitempty"`
}

// StandardAttributes returns d's standard attributes; false for a device
// without a known PCI function.
func (t *Topology) StandardAttributes(d *Device) (Standard, bool) {
	if d.PCI == nil {
		return Standard{}, false
	}
	s := Standard{PCIeRoot: d.PCI.Root, PCIBusID: d.PCI.Address.String()}
	if n := d.PCI.NUMANode; n >= 0 {
		s.NUMANode = &n
		s.NUMANodes = t.numaList(n)
	}
	return s, true
}

// numaList is deviceattribute's list form: node first, then every other
// node at the minimum distance whose socket is not known to differ.
func (t *Topology) numaList(node int) []int {
	out := []int{node}
	if t.Host == nil {
		return out
	}
	self := t.Host.Node(node)
	if self == nil || node >= len(self.Distances) {
		return out
	}
	min := -1
	for i, d := range self.Distances {
		if i != node && (min == -1 || d < min) {
			min = d
		}
	}
	if min == -1 {
		return out
	}
	for i, d := range self.Distances {
		if i == node || d != min {
			continue
		}
		if self.Socket >= 0 {
			if o := t.Host.Node(i); o != nil && o.Socket >= 0 && o.Socket != self.Socket {
				continue
			}
		}
		out = append(out, i)
	}
	slices.Sort(out[1:])
	return out
}
