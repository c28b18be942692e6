package topology_test

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/fixturegen/scale"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// The definitions the indexed answers must keep, computed the plain way:
// every pair compared.

// bridgeLink is PCILink from the two bridge chains.
func bridgeLink(a, b *pcie.Device) topology.Link {
	if a == b {
		return topology.LinkSelf
	}
	if a.Root != b.Root {
		if a.NUMANode >= 0 && b.NUMANode >= 0 && a.NUMANode != b.NUMANode {
			return topology.LinkSys
		}
		return topology.LinkNode
	}
	ca, cb := a.Bridges(), b.Bridges()
	common := 0
	for common < len(ca) && common < len(cb) && ca[common] == cb[common] {
		common++
	}
	switch {
	case common == 0:
		return topology.LinkPHB
	case len(ca) == common && len(cb) == common:
		return topology.LinkPIX
	}
	return topology.LinkPXB
}

// closestByLinks is Closest by its definition: the family table's
// attachment on Trainium, else the other side's devices at the best link
// class, in device order.
func closestByLinks(t *topology.Topology, d *topology.Device) []*topology.Device {
	var cands []*topology.Device
	for _, o := range t.Devices {
		if o != d && o.IsAccelerator() != d.IsAccelerator() {
			cands = append(cands, o)
		}
	}
	if t.Table != nil && (d.Kind == topology.KindNeuron || d.Kind == topology.KindEFA) {
		var out []*topology.Device
		for _, o := range cands {
			n, e := d, o
			if d.Kind == topology.KindEFA {
				n, e = o, d
			}
			if n.Kind != topology.KindNeuron || n.NeuronIndex < 0 || e.PCI == nil {
				continue
			}
			if a, ok := t.Table.NeuronEFA[n.NeuronIndex]; ok && a == e.PCI.Address {
				out = append(out, o)
			}
		}
		if len(out) > 0 || d.Kind == topology.KindNeuron {
			return out
		}
	}
	// From SELF (the best) to SYS; LinkUnknown is never closest.
	best := topology.LinkSys + 1
	var out []*topology.Device
	for _, o := range cands {
		l := t.Link(d, o)
		switch {
		case l == topology.LinkUnknown:
		case l < best:
			best, out = l, []*topology.Device{o}
		case l == best:
			out = append(out, o)
		}
	}
	return out
}

// numaListByNodes is the list form of numaNode from the host's nodes as
// Host.Node finds them.
func numaListByNodes(t *topology.Topology, node int) []int {
	out := []int{node}
	if t.Host == nil {
		return out
	}
	self := t.Host.Node(node)
	if self == nil || node >= len(self.Distances) {
		return out
	}
	least := -1
	for i, d := range self.Distances {
		if i != node && (least == -1 || d < least) {
			least = d
		}
	}
	for i, d := range self.Distances {
		if i == node || d != least {
			continue
		}
		if o := t.Host.Node(i); self.Socket >= 0 && o != nil && o.Socket >= 0 && o.Socket != self.Socket {
			continue
		}
		out = append(out, i)
	}
	slices.Sort(out[1:])
	return out
}

// checkAnswers compares every answer of topo with its definition: links of
// every pair (and their symmetry), closest devices, standard attributes,
// lookups by name and address. It returns the first difference, "" for
// none.
func checkAnswers(topo *topology.Topology) string {
	for _, d := range topo.Devices {
		if topo.Link(d, d) != topology.LinkSelf {
			return d.Name + ": not SELF to itself"
		}
		for _, o := range topo.Devices {
			l := topo.Link(d, o)
			if l != topo.Link(o, d) {
				return d.Name + "-" + o.Name + ": link not symmetric"
			}
			if d != o && d.PCI != nil && o.PCI != nil && l != bridgeLink(d.PCI, o.PCI) {
				return d.Name + "-" + o.Name + ": link " + l.String() + ", the bridge chains say " + bridgeLink(d.PCI, o.PCI).String()
			}
		}
		got, want := names(topo.Closest(d)), names(closestByLinks(topo, d))
		if !slices.Equal(got, want) {
			return d.Name + ": closest " + join(got) + ", by the link classes " + join(want)
		}
		if b := topo.ByName(d.Name); b == nil || b.Name != d.Name {
			return d.Name + ": not found by name"
		}
		s, ok := topo.StandardAttributes(d)
		if ok != (d.PCI != nil) {
			return d.Name + ": standard attributes without a PCI function, or none with one"
		}
		if !ok {
			continue
		}
		if b := topo.Lookup(d.PCI.Address); b == nil || b.PCI.Address != d.PCI.Address {
			return d.Name + ": not found by address"
		}
		if s.PCIBusID != d.PCI.Address.String() || s.PCIeRoot != d.PCI.Root {
			return d.Name + ": pciBusID or pcieRoot differ from its function"
		}
		if (s.NUMANode == nil) != (d.PCI.NUMANode < 0) {
			return d.Name + ": numaNode set for an unknown node, or unset for a known one"
		}
		if s.NUMANode != nil && !slices.Equal(s.NUMANodes, numaListByNodes(topo, *s.NUMANode)) {
			return d.Name + ": numaNodes differ from the host's distances"
		}
	}
	return ""
}

func join(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// oddTree is a machine no instance type is, for the corners of Closest:
// a GPU function that is also an EFA (SELF), two functions below one bridge
// and two below sibling bridges (PIX, PXB), functions on the root bus
// beside a switch (PHB), EFAs on roots without accelerators whose nodes are
// the same as, unknown to or other than the accelerators' (NODE, SYS).
func oddTree() *fakesys.Builder {
	b := fakesys.New()
	b.NUMANodes(21, "0-3", "4-7")
	fn := func(addr, parent string, numa int, vendor, device uint16, class uint32, driver string) {
		b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: vendor, Device: device, Class: class, Driver: driver, NUMA: numa, CPUs: "0-3"})
	}
	br := func(addr, parent string) { fn(addr, parent, 0, 0x1d0f, 0x0200, 0x060400, "pcieport") }
	gpu := func(addr, parent string, numa int) { fn(addr, parent, numa, 0x10de, 0x2330, 0x030200, "nvidia") }
	efa := func(addr, parent string, numa int) { fn(addr, parent, numa, 0x1d0f, 0xefa1, 0x020000, "efa") }
	// Root 10: a switch with two ports, and the root bus beside it.
	br("0000:10:00.0", "")
	br("0000:11:00.0", "0000:10:00.0")
	br("0000:12:01.0", "0000:11:00.0")
	br("0000:12:02.0", "0000:11:00.0")
	gpu("0000:13:00.0", "0000:12:01.0", 0)
	efa("0000:13:00.1", "0000:12:01.0", 0)
	efa("0000:14:00.0", "0000:12:02.0", 0)
	gpu("0000:10:05.0", "", 0)
	efa("0000:10:06.0", "", 0)
	// A GPU bound to efa with an RDMA device: one function, two devices.
	fn("0000:20:00.0", "", 1, 0x10de, 0x2330, 0x030200, "efa")
	// EFAs alone on their roots, and GPUs of node 1 and of no node.
	efa("0000:30:00.0", "", 1)
	efa("0000:40:00.0", "", -1)
	efa("0000:50:00.0", "", 0)
	gpu("0000:60:00.0", "", -1)
	gpu("0000:70:00.0", "", 1)
	for i, a := range []string{"0000:10:06.0", "0000:13:00.1", "0000:14:00.0", "0000:20:00.0", "0000:30:00.0", "0000:40:00.0", "0000:50:00.0"} {
		b.AddEFA(fakesys.EFA{Addr: a, IBName: fmt.Sprintf("efa_%d", i), Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0000", GID: "fe80:0000:0000:0000:0000:0000:0000:0000"})
	}
	return b
}

// TestAnswersKeepTheirDefinitions: on every fixture, on p5.48xlarge three
// times over and on a tree of odd corners, every answer is what comparing
// every pair gives.
func TestAnswersKeepTheirDefinitions(t *testing.T) {
	t.Parallel()
	trees := map[string]fs.ReadLinkFS{"odd": oddTree().FS(), "sys": sysTree().FS(), "p5x3": scale.P5(3).FS()}
	for name, path := range fixtures(t) {
		r, err := sysfs.Open(path)
		require.NoError(t, err)
		trees[name] = r
	}
	for name, fsys := range trees {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topo, err := topology.Scan(fsys)
			require.NoError(t, err)
			assert.Empty(t, checkAnswers(topo))
		})
	}
	t.Run("odd classes", func(t *testing.T) {
		topo, err := topology.Scan(oddTree().FS())
		require.NoError(t, err)
		by := func(a string, k topology.Kind) *topology.Device {
			for _, d := range topo.Devices {
				if d.PCI.Address.String() == a && d.Kind == k {
					return d
				}
			}
			t.Fatalf("no %s at %s", k, a)
			return nil
		}
		for _, tc := range []struct {
			addr string
			kind topology.Kind
			want []string
			link topology.Link
		}{
			{"0000:13:00.0", topology.KindGPU, []string{"0000:13:00.1"}, topology.LinkPIX},
			{"0000:14:00.0", topology.KindEFA, []string{"0000:13:00.0"}, topology.LinkPXB},
			{"0000:10:06.0", topology.KindEFA, []string{"0000:10:05.0", "0000:13:00.0"}, topology.LinkPHB},
			{"0000:20:00.0", topology.KindGPU, []string{"0000:20:00.0"}, topology.LinkSelf},
			{"0000:30:00.0", topology.KindEFA, []string{"0000:20:00.0", "0000:60:00.0", "0000:70:00.0"}, topology.LinkNode},
			{"0000:40:00.0", topology.KindEFA, []string{"0000:10:05.0", "0000:13:00.0", "0000:20:00.0", "0000:60:00.0", "0000:70:00.0"}, topology.LinkNode},
			{"0000:50:00.0", topology.KindEFA, []string{"0000:10:05.0", "0000:13:00.0", "0000:60:00.0"}, topology.LinkNode},
			{"0000:60:00.0", topology.KindGPU, []string{"0000:10:06.0", "0000:13:00.1", "0000:14:00.0", "0000:20:00.0", "0000:30:00.0", "0000:40:00.0", "0000:50:00.0"}, topology.LinkNode},
		} {
			d := by(tc.addr, tc.kind)
			var got []string
			for _, o := range topo.Closest(d) {
				got = append(got, o.PCI.Address.String())
				assert.Equal(t, tc.link, topo.Link(d, o), "%s %s-%s", tc.kind, tc.addr, o.Name)
			}
			assert.Equal(t, tc.want, got, "%s %s", tc.kind, tc.addr)
		}
	})
	t.Run("SYS", func(t *testing.T) {
		topo, err := topology.Scan(sysTree().FS())
		require.NoError(t, err)
		for _, d := range topo.Devices {
			c := topo.Closest(d)
			require.Len(t, c, 2, d.Name)
			for _, o := range c {
				assert.Equal(t, topology.LinkSys, topo.Link(d, o))
			}
		}
	})
}

// sysTree has two GPUs on NUMA node 1 and two EFAs on node 0, each on a
// root of its own: every pair is SYS.
func sysTree() *fakesys.Builder {
	b := fakesys.New()
	b.NUMANodes(21, "0-3", "4-7")
	for i, a := range []string{"0000:10:00.0", "0000:20:00.0", "0000:30:00.0", "0000:40:00.0"} {
		p := fakesys.PCI{Addr: a, Vendor: 0x10de, Device: 0x2330, Class: 0x030200, Driver: "nvidia", NUMA: 1, CPUs: "4-7"}
		if i%2 == 0 {
			p = fakesys.PCI{Addr: a, Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-3"}
		}
		b.AddPCI(p)
		if i%2 == 0 {
			b.AddEFA(fakesys.EFA{Addr: a, IBName: fmt.Sprintf("efa_%d", i), Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0000", GID: "fe80:0000:0000:0000:0000:0000:0000:0000"})
		}
	}
	return b
}

// TestAnswersDoNotGrowWithTheMachine: what one device's closest devices,
// standard attributes and name lookup cost in allocations does not depend
// on how many other devices the machine has (p5.48xlarge once and ten
// times over), only on the answer. 500 runs each: AllocsPerRun counts the
// whole process's allocations and rounds the mean down, so a stray one of
// the runtime's does not count.
func TestAnswersDoNotGrowWithTheMachine(t *testing.T) {
	allocs := func(k int) map[string]float64 {
		topo, err := topology.Scan(scale.P5(k).FS())
		require.NoError(t, err)
		out := map[string]float64{}
		for _, name := range []string{"GPU0", "rdmap79s0"} {
			d := topo.ByName(name)
			require.NotNil(t, d)
			out[name+" closest"] = testing.AllocsPerRun(500, func() { topo.Closest(d) })
			out[name+" standard attributes"] = testing.AllocsPerRun(500, func() { topo.StandardAttributes(d) })
			out[name+" by name"] = testing.AllocsPerRun(500, func() { topo.ByName(name) })
		}
		return out
	}
	// Allocation counts come from the whole process's statistics, so a
	// goroutine of an earlier test can add one; an answer that grew with
	// the machine would add ten times its own.
	small, large := allocs(1), allocs(10)
	for k, n := range small {
		assert.LessOrEqual(t, large[k], n+1, k)
	}
}
