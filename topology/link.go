package topology

import (
	"fmt"
	"slices"

	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/pcie"
)

// Link is how two devices are connected, in the classes of
// `nvidia-smi topo -m`, best first. The zero Link is LinkUnknown.
type Link int

// The link classes, from the closest to the farthest; LinkUnknown, the
// zero value, first.
const (
	// LinkUnknown: a device without a known PCI function, or none.
	LinkUnknown Link = iota
	// LinkSelf: the same device.
	LinkSelf
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
)

var linkNames = [...]string{"?", "SELF", "PIX", "PXB", "PHB", "NODE", "SYS"}

func (l Link) String() string {
	if l < 0 || int(l) >= len(linkNames) {
		return fmt.Sprintf("Link(%d)", int(l))
	}
	return linkNames[l]
}

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
	if a == nil || b == nil {
		return LinkUnknown
	}
	if a == b {
		return LinkSelf
	}
	if a.PCI == nil || b.PCI == nil {
		return LinkUnknown
	}
	return pCILink(a.PCI, b.PCI)
}

// pCILink is Link for two PCI functions; LinkUnknown when one is nil.
func pCILink(a, b *pcie.Device) Link {
	if a == nil || b == nil {
		return LinkUnknown
	}
	if a == b {
		return LinkSelf
	}
	if a.Root != b.Root {
		if a.NUMANode >= 0 && b.NUMANode >= 0 && a.NUMANode != b.NUMANode {
			return LinkSys
		}
		return LinkNode
	}
	// The bridges above each, from the root down, share a prefix of
	// common ones: their deepest common bridge is at depth common.
	da, db := depth(a), depth(b)
	pa, pb := a.Parent, b.Parent
	for range da - db {
		pa = pa.Parent
	}
	for range db - da {
		pb = pb.Parent
	}
	common := min(da, db)
	for pa != pb {
		pa, pb = pa.Parent, pb.Parent
		common--
	}
	if common == 0 {
		return LinkPHB
	}
	// The bridges on the way: the nearest common one, and those below it
	// on either side.
	if (da-common)+(db-common)+1 <= 1 {
		return LinkPIX
	}
	return LinkPXB
}

// depth is the number of bridges above p.
func depth(p *pcie.Device) int {
	n := 0
	for b := p.Parent; b != nil; b = b.Parent {
		n++
	}
	return n
}

// Closest returns the devices of the other side closest to d: for an EFA
// the accelerators, for an accelerator the EFAs. Closest means the best
// link class; on a Trainium machine with a family table, the table's
// Neuron-EFA attachment is the ground truth (trn1's roots are flat, so
// the PCI tree alone puts four Neuron devices at the same distance from
// each EFA).
//
// The answer comes from an index of the devices by root complex, bridge
// and NUMA node, so it costs what it returns, not the machine's size.
func (t *Topology) Closest(d *Device) []*Device {
	if t == nil || d == nil || (d.Kind != KindGPU && d.Kind != KindNeuron && d.Kind != KindEFA) {
		return nil
	}
	ix := t.ix()
	if t.Table != nil {
		switch {
		case d.Kind == KindNeuron:
			if d.NeuronIndex < 0 {
				return nil
			}
			a, ok := t.Table.NeuronEFA[d.NeuronIndex]
			if !ok {
				return nil
			}
			return ix.pick(ix.efaAt[a])
		case d.Kind == KindEFA && d.PCI != nil:
			if out := ix.neuronsOfEFA[d.PCI.Address]; len(out) > 0 {
				return ix.pick(out)
			}
		}
	}
	p := d.PCI
	if p == nil {
		return nil
	}
	// The other side, by link class from the best: the same function
	// (SELF), the same upstream bridge (PIX), the same topmost bridge
	// (PXB), the same root complex (PHB), a root of the same or an
	// unknown NUMA node (NODE), any other (SYS).
	o := &ix.sides[1-sideOf(d)]
	if s := o.byPCI[p]; len(s) > 0 {
		return ix.pick(s)
	}
	if p.Parent != nil {
		if s := o.byParent[bridgeKey{p.Root, p.Parent}]; len(s) > 0 {
			return ix.pick(s)
		}
		if s := o.byTop[bridgeKey{p.Root, top(p)}]; len(s) > 0 {
			return ix.pick(s)
		}
	}
	if s := o.byRoot[p.Root]; len(s) > 0 {
		return ix.pick(s)
	}
	// No device of the other side shares the root complex from here on.
	if p.NUMANode < 0 {
		return ix.pick(o.withPCI)
	}
	if s := ix.pickMerged(o.byNUMA[p.NUMANode], o.byNUMA[-1]); len(s) > 0 {
		return s
	}
	return ix.pick(o.withPCI)
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
	if t == nil || d == nil || d.PCI == nil {
		return Standard{}, false
	}
	s := Standard{PCIeRoot: d.PCI.Root, PCIBusID: d.PCI.Address.String()}
	if n := d.PCI.NUMANode; n >= 0 {
		s.NUMANode = &n
		if l, ok := t.ix().numaLists[n]; ok {
			s.NUMANodes = slices.Clone(l)
		} else {
			s.NUMANodes = []int{n} // a node the host does not list
		}
	}
	return s, true
}

// numaList is deviceattribute's list form: node first, then every other
// node at the minimum distance whose socket is not known to differ. nodes
// are the host's, by ID.
func numaList(nodes map[int]*host.NUMANode, node int) []int {
	out := []int{node}
	self := nodes[node]
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
			if o := nodes[i]; o != nil && o.Socket >= 0 && o.Socket != self.Socket {
				continue
			}
		}
		out = append(out, i)
	}
	slices.Sort(out[1:])
	return out
}
