package topology

import (
	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/pcie"
)

// index holds what the per-device answers look up, so that asking every
// device costs about what the machine's size does rather than its square:
// the devices of each side grouped by what decides a link class, the
// names, the Neuron-EFA attachments of the family table and the NUMA list
// of each node. It is made once, from the topology as it is at the first
// question.
type index struct {
	devs   []*Device // Topology.Devices; groups hold positions in it, ascending
	byName map[string]*Device
	// sides[0] are the accelerators, sides[1] the EFAs.
	sides [2]side
	// With a family table: the EFAs by PCI address, and the Neuron
	// devices by the address of the EFA the table attaches them to.
	efaAt        map[pcie.Address][]int
	neuronsOfEFA map[pcie.Address][]int
	numaLists    map[int][]int
}

// side groups the devices of one side by the keys pCILink compares.
type side struct {
	byPCI    map[*pcie.Device][]int
	byParent map[bridgeKey][]int // same root and upstream bridge: PIX
	byTop    map[bridgeKey][]int // same root and topmost bridge: PXB
	byRoot   map[string][]int    // same root complex: PHB
	byNUMA   map[int][]int       // other roots, by NUMA node (-1 unknown): NODE
	withPCI  []int               // the rest: SYS
}

type bridgeKey struct {
	root   string
	bridge *pcie.Device
}

func sideOf(d *Device) int {
	if d.IsAccelerator() {
		return 0
	}
	return 1
}

// top is the topmost bridge above p, nil for a function on a root bus.
func top(p *pcie.Device) *pcie.Device {
	var t *pcie.Device
	for b := p.Parent; b != nil; b = b.Parent {
		t = b
	}
	return t
}

func numaKey(n int) int {
	if n < 0 {
		return -1
	}
	return n
}

func (t *Topology) ix() *index {
	t.once.Do(func() { t.idx = t.newIndex() })
	return t.idx
}

func (t *Topology) newIndex() *index {
	ix := &index{devs: t.Devices, byName: make(map[string]*Device, len(t.Devices))}
	for i := range ix.sides {
		ix.sides[i] = side{byPCI: map[*pcie.Device][]int{}, byParent: map[bridgeKey][]int{},
			byTop: map[bridgeKey][]int{}, byRoot: map[string][]int{}, byNUMA: map[int][]int{}}
	}
	if t.Table != nil {
		ix.efaAt, ix.neuronsOfEFA = map[pcie.Address][]int{}, map[pcie.Address][]int{}
	}
	for i, d := range t.Devices {
		if _, ok := ix.byName[d.Name]; !ok {
			ix.byName[d.Name] = d
		}
		if t.Table != nil {
			switch {
			case d.Kind == KindEFA && d.PCI != nil:
				ix.efaAt[d.PCI.Address] = append(ix.efaAt[d.PCI.Address], i)
			case d.Kind == KindNeuron && d.NeuronIndex >= 0:
				if a, ok := t.Table.NeuronEFA[d.NeuronIndex]; ok {
					ix.neuronsOfEFA[a] = append(ix.neuronsOfEFA[a], i)
				}
			}
		}
		p := d.PCI
		if p == nil {
			continue
		}
		s := &ix.sides[sideOf(d)]
		s.byPCI[p] = append(s.byPCI[p], i)
		if p.Parent != nil {
			k := bridgeKey{p.Root, p.Parent}
			s.byParent[k] = append(s.byParent[k], i)
			k.bridge = top(p)
			s.byTop[k] = append(s.byTop[k], i)
		}
		s.byRoot[p.Root] = append(s.byRoot[p.Root], i)
		s.byNUMA[numaKey(p.NUMANode)] = append(s.byNUMA[numaKey(p.NUMANode)], i)
		s.withPCI = append(s.withPCI, i)
	}
	if t.Host != nil {
		nodes := make(map[int]*host.NUMANode, len(t.Host.NUMANodes))
		for k := range t.Host.NUMANodes {
			n := &t.Host.NUMANodes[k]
			if nodes[n.ID] == nil { // the first, as Host.Node finds it
				nodes[n.ID] = n
			}
		}
		ix.numaLists = make(map[int][]int, len(nodes))
		for id := range nodes {
			ix.numaLists[id] = numaList(nodes, id)
		}
	}
	return ix
}

// pick returns the devices at the given positions.
func (ix *index) pick(pos []int) []*Device {
	if len(pos) == 0 {
		return nil
	}
	out := make([]*Device, len(pos))
	for i, p := range pos {
		out[i] = ix.devs[p]
	}
	return out
}

// pickMerged returns the devices of two ascending position lists, in order.
func (ix *index) pickMerged(a, b []int) []*Device {
	switch {
	case len(a) == 0:
		return ix.pick(b)
	case len(b) == 0:
		return ix.pick(a)
	}
	out := make([]*Device, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || (len(a) > 0 && a[0] < b[0]) {
			out, a = append(out, ix.devs[a[0]]), a[1:]
		} else {
			out, b = append(out, ix.devs[b[0]]), b[1:]
		}
	}
	return out
}
