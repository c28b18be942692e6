package topology_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// ncclGroup is one group of AWS's NCCL topology files: NICs and the GPUs
// they serve under one PCIe switch (or, where the file names no GPU, the
// switch port above them), on one NUMA node.
type ncclGroup struct {
	gpus    []string // GPU PCI addresses; nil where the file lists none
	nics    []string // NIC PCI addresses
	switch_ string   // the switch's upstream port, where the file names it
	numa    int
}

// ncclFacts are the facts of aws-ofi-nccl's topology/ files
// (github.com/aws/aws-ofi-nccl), written out by hand: p4d-24xl-topo.xml and
// p4de-24xl-topo.xml (2 GPUs and 1 NIC a group), p5.48xl-topo.xml (4 NICs
// behind each switch, no GPUs; removed from master in June 2025, read in
// its history). g5.48xl-topo.xml has no fixture here.
var ncclFacts = map[string][]ncclGroup{
	"p4d.24xlarge":  a100Groups,
	"p4de.24xlarge": a100Groups,
	"p5.48xlarge": {
		{switch_: "0000:45:00.0", nics: busList(0x4f, 0x50, 0x51, 0x52), numa: 0},
		{switch_: "0000:56:00.0", nics: busList(0x60, 0x61, 0x62, 0x63), numa: 0},
		{switch_: "0000:67:00.0", nics: busList(0x71, 0x72, 0x73, 0x74), numa: 0},
		{switch_: "0000:78:00.0", nics: busList(0x82, 0x83, 0x84, 0x85), numa: 0},
		{switch_: "0000:89:00.0", nics: busList(0x93, 0x94, 0x95, 0x96), numa: 1},
		{switch_: "0000:9a:00.0", nics: busList(0xa4, 0xa5, 0xa6, 0xa7), numa: 1},
		{switch_: "0000:ab:00.0", nics: busList(0xb5, 0xb6, 0xb7, 0xb8), numa: 1},
		{switch_: "0000:bc:00.0", nics: busList(0xc6, 0xc7, 0xc8, 0xc9), numa: 1},
	},
}

var a100Groups = []ncclGroup{
	{gpus: []string{"0000:10:1c.0", "0000:10:1d.0"}, nics: []string{"0000:10:1b.0"}, numa: 0},
	{gpus: []string{"0000:20:1c.0", "0000:20:1d.0"}, nics: []string{"0000:20:1b.0"}, numa: 0},
	{gpus: []string{"0000:90:1c.0", "0000:90:1d.0"}, nics: []string{"0000:90:1b.0"}, numa: 1},
	{gpus: []string{"0000:a0:1c.0", "0000:a0:1d.0"}, nics: []string{"0000:a0:1b.0"}, numa: 1},
}

func busList(buses ...int) []string {
	var out []string
	for _, b := range buses {
		out = append(out, fmt.Sprintf("0000:%02x:00.0", b))
	}
	return out
}

func addrsOf(ds []*topology.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.PCI.Address.String())
	}
	slices.Sort(out)
	return out
}

func lookup(t *testing.T, topo *topology.Topology, s string) *topology.Device {
	t.Helper()
	a, err := pcie.ParseAddress(s)
	require.NoError(t, err)
	d := topo.Lookup(a)
	require.NotNil(t, d, "%s is not in the fixture", s)
	return d
}

// TestNCCLTopologyPairing checks that each GPU fixture pairs every NIC
// with the GPUs AWS's NCCL topology file says it serves, and the reverse,
// as `efakit topo` answers it (Topology.Closest).
func TestNCCLTopologyPairing(t *testing.T) {
	t.Parallel()
	for name, groups := range ncclFacts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topo := scan(t, name)
			for _, g := range groups {
				nics := slices.Sorted(slices.Values(g.nics))
				gpus := g.gpus
				if gpus == nil {
					// The file names the switch: the GPU is the one below it.
					for _, gpu := range topo.Of(topology.KindGPU) {
						for _, b := range gpu.PCI.Bridges() {
							if b.Address.String() == g.switch_ {
								gpus = append(gpus, gpu.PCI.Address.String())
							}
						}
					}
					require.Len(t, gpus, 1, "GPUs behind switch %s", g.switch_)
				}
				for _, n := range nics {
					d := lookup(t, topo, n)
					assert.Equal(t, topology.KindEFA, d.Kind, n)
					assert.Equal(t, g.numa, d.NUMANode(), "%s: NUMA node", n)
					assert.Equal(t, slices.Sorted(slices.Values(gpus)), addrsOf(topo.Closest(d)), "%s: closest GPUs", n)
					if g.switch_ != "" {
						assert.True(t, slices.ContainsFunc(d.PCI.Bridges(), func(b *pcie.Device) bool { return b.Address.String() == g.switch_ }),
							"%s: not behind switch %s", n, g.switch_)
					}
				}
				for _, x := range gpus {
					d := lookup(t, topo, x)
					assert.Equal(t, topology.KindGPU, d.Kind, x)
					assert.Equal(t, g.numa, d.NUMANode(), "%s: NUMA node", x)
					assert.Equal(t, nics, addrsOf(topo.Closest(d)), "%s: closest NICs", x)
				}
			}
		})
	}
}

// sharesSwitch is, per EFA, whether it shares a PCIe switch with a GPU, as
// the NIC tables of an aws-ofi-nccl topology unit test (hwloc fixtures of
// real instances, Amazon copyright 2026, seen through code search; its
// repository path not identified) give it: true for every EFA of p5en,
// p6-b200 and p6-b300 and for p6e-gb200's GPU-local EFAs, false for p4d and
// for p6e-gb200's CPU-mediated (C2C) EFAs.
var sharesSwitch = map[string]map[string]bool{
	"p4d.24xlarge": {"0000:10:1b.0": false, "0000:20:1b.0": false, "0000:90:1b.0": false, "0000:a0:1b.0": false},
	"p5en.48xlarge": switchFacts(true, 0x55, 0x56, 0x57, 0x58, 0x6e, 0x6f, 0x70, 0x71,
		0x87, 0x88, 0x89, 0x8a, 0xa0, 0xa1, 0xa2, 0xa3),
	"p6-b200.48xlarge": switchFacts(true, 0x4f, 0x50, 0x60, 0x61, 0x71, 0x72, 0x84, 0x85),
	"p6-b300.48xlarge": switchFacts(true, 0x56, 0x57, 0x65, 0x66, 0x74, 0x75, 0x83, 0x84,
		0x92, 0x93, 0xa1, 0xa2, 0xb0, 0xb1, 0xbf, 0xc0),
	"p6e-gb200.36xlarge": merge(
		switchFacts(true, 0x27, 0x28, 0x3d, 0x3e, 0x9a, 0x9b, 0xb0, 0xb1),
		switchFacts(false, 0x36, 0x37, 0x4c, 0x4d, 0xa9, 0xaa, 0xbf, 0xc0)),
}

func switchFacts(v bool, buses ...int) map[string]bool {
	out := map[string]bool{}
	for _, a := range busList(buses...) {
		out[a] = v
	}
	return out
}

func merge(a, b map[string]bool) map[string]bool {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// TestNICSharesSwitchWithGPU checks each fixture's EFAs, all of them and
// only them, against sharesSwitch: a NIC that shares a switch with a GPU is
// PIX or PXB from its closest GPU; one that does not is farther from every
// GPU.
func TestNICSharesSwitchWithGPU(t *testing.T) {
	t.Parallel()
	for name, facts := range sharesSwitch {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topo := scan(t, name)
			efas := addrsOf(topo.Of(topology.KindEFA))
			want := slices.Sorted(func(yield func(string) bool) {
				for a := range facts {
					if !yield(a) {
						return
					}
				}
			})
			require.Equal(t, want, efas, "the fixture's EFAs")
			gpus := topo.Of(topology.KindGPU)
			require.NotEmpty(t, gpus)
			for a, shares := range facts {
				d := lookup(t, topo, a)
				best := topology.LinkUnknown
				for _, g := range gpus {
					if l := topo.Link(d, g); l != topology.LinkUnknown && (best == topology.LinkUnknown || l < best) {
						best = l
					}
				}
				got := best == topology.LinkPIX || best == topology.LinkPXB
				assert.Equal(t, shares, got, "%s: best link to a GPU %s", a, best)
			}
		})
	}
}

// TestP5Lstopo checks the p5 fixture against the public lstopo -v of a
// p5.48xlarge (Hugging Face, The Smol Training Playbook, chapter
// "Infrastructure"): the chain root port 44:00.0 -> 45:00.0 -> 46:01.0 ->
// EFA rdmap79s0 at 4f:00.0, and 46:01.4 -> H100 at 53:00.0.
func TestP5Lstopo(t *testing.T) {
	t.Parallel()
	topo := scan(t, "p5.48xlarge")
	for _, c := range []struct {
		dev, name string
		chain     []string // bridges above it, root port first
	}{
		{"0000:4f:00.0", "rdmap79s0", []string{"0000:44:00.0", "0000:45:00.0", "0000:46:01.0"}},
		{"0000:53:00.0", "GPU0", []string{"0000:44:00.0", "0000:45:00.0", "0000:46:01.4"}},
	} {
		d := lookup(t, topo, c.dev)
		assert.Equal(t, c.name, d.Name)
		assert.Equal(t, c.chain, addrsInOrder(d.PCI.Bridges()), c.dev)
		assert.Equal(t, "pci0000:44", d.PCI.Root, c.dev)
	}
}

func addrsInOrder(ds []*pcie.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Address.String())
	}
	return out
}
