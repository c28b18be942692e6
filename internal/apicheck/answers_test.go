package apicheck

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// covered are the methods FuzzAnswersNeverPanic calls, as api/*.txt names
// them ("(*Topology) Closest"): every String method and every method of
// the types a user asks questions of.
var covered = []string{
	"topology (*Topology) Accelerators", "topology (*Topology) ByName", "topology (*Topology) Closest", "topology (*Topology) Link",
	"topology (*Topology) Lookup", "topology (*Topology) Of", "topology (*Topology) StandardAttributes",
	"topology (*Device) IsAccelerator", "topology (*Device) NUMANode",
	"topology (Kind) String", "topology (Kind) MarshalText", "topology (Link) String", "topology (Link) MarshalText",
	"pcie (*Tree) Lookup", "pcie (Address) String", "pcie (Class) String", "pcie (ACS) String", "pcie (CPUList) String",
	"pcie (LinkRate) String", "pcie (LinkRate) Below",
	"host (*Info) Node", "host (*Info) Distance",
	"neuron (*Table) EFAGroups", "neuron (*Table) GroupID", "neuron (*Table) IndexOf", "neuron (*Table) Indexes",
	"neuron (*Table) NeuronGroups", "neuron (*Table) NeuronsOf",
	"efa (Generation) String", "efa/health (Grade) String",
	"gpudirect (Status) String", "gpudirect (Status) MarshalText", "gpudirect (Status) Usable",
	"gpudirect (Pair) ReadyBy", "gpudirect (Pair) Reasons",
	"sysfs (*Error) Error", "sysfs (*Error) Unwrap",
}

// askedTypes are the receivers whose every method the fuzz target must
// call, besides every String method.
var askedTypes = []string{"topology (*Topology)", "topology (*Device)", "topology (Kind)", "topology (Link)",
	"pcie (*Tree)", "host (*Info)", "neuron (*Table)", "gpudirect (Status)", "gpudirect (Pair)", "sysfs (*Error)"}

// TestFuzzCoversTheAPI: the methods FuzzAnswersNeverPanic calls are every
// String and Error method of the library and every method of the types users ask
// questions of, as api/*.txt records them: a new one is fed nil and
// out-of-range input too.
func TestFuzzCoversTheAPI(t *testing.T) {
	method := regexp.MustCompile(`^pkg [a-z/]+, method (\([^)]*\)) ([A-Za-z]+)\(`)
	var want []string
	for _, pkg := range Packages {
		b, err := os.ReadFile(file(pkg))
		require.NoError(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			m := method.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			recv := pkg + " " + regexp.MustCompile(`\(\w+ `).ReplaceAllString(m[1], "(")
			name := recv + " " + m[2]
			if m[2] == "String" || m[2] == "Error" || slices.Contains(askedTypes, recv) {
				want = append(want, name)
			}
		}
	}
	for _, w := range want {
		assert.Contains(t, covered, w, "FuzzAnswersNeverPanic calls %s", w)
	}
}

// scanned is the trn1 capture (with its Neuron table) the questions are asked of, read once.
var scanned = sync.OnceValues(func() (*topology.Topology, error) {
	root, err := sysfs.Open(filepath.Join("..", "..", "testdata", "sysfs", "trn1.32xlarge.sysfs"))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return topology.Scan(root)
})

// FuzzAnswersNeverPanic asks every question of the API (lookups by name
// and address, the link between two devices, the closest devices, the
// standard attributes, the Neuron table's groups, a NUMA node's distance)
// and prints every enum, with nil, unknown and out-of-range input, of a
// real topology and of nil ones: an answer or "none", never a panic.
func FuzzAnswersNeverPanic(f *testing.F) {
	f.Add(0, 0, "GPU0", "EFA", "0000:10:1c.0", uint64(0))
	f.Add(3, 7, "GPU9", "rdmap16s27", "0000:ff:1f.7", uint64(math.MaxUint64))
	f.Add(-1, math.MaxInt, "", "NEURON3", "zzzz", uint64(1<<32))
	f.Add(math.MinInt, 16, "NEURON0", "rdmap113s27", "0000:a0:00.0", uint64(0xffff))
	topo, err := scanned()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, n, m int, name, other, addr string, bits uint64) {
		a, _ := pcie.ParseAddress(addr)
		for _, tp := range []*topology.Topology{topo, nil, {}} {
			d, o := tp.ByName(name), tp.ByName(other)
			for _, x := range []*topology.Device{d, o, nil, tp.Lookup(a), {}, {Kind: topology.Kind(n)}} {
				_ = tp.Closest(x)
				_ = tp.Link(x, d)
				_ = tp.Link(o, x)
				_, _ = tp.StandardAttributes(x)
				_ = x.IsAccelerator()
				_ = x.NUMANode()
			}
			_ = tp.Of(topology.Kind(n))
			_ = tp.Accelerators()
			var table *neuron.Table
			var info *host.Info
			if tp != nil {
				table, info = tp.Table, tp.Host
			}
			for _, tb := range []*neuron.Table{table, nil} {
				_, _ = tb.EFAGroups(a)
				_ = tb.GroupID(n, m)
				_ = tb.IndexOf(a)
				_ = tb.Indexes()
				_, _ = tb.NeuronGroups(n)
				_ = tb.NeuronsOf(a)
			}
			for _, in := range []*host.Info{info, nil} {
				_ = in.Node(n)
				_ = in.Distance(n, m)
			}
		}
		var tree *pcie.Tree
		_ = tree.Lookup(a)
		_ = a.String()
		_, _ = a.MarshalText()
		_ = a.Compare(pcie.Address{})
		c := pcie.Class(bits)
		_, _, _ = c.String(), c.Base(), c.Sub()
		acs := pcie.ACS{Capability: uint16(bits), Control: uint16(bits >> 16)}
		_, _ = acs.String(), acs.Redirects()
		pl := pcie.LinkRate{Speed: float64(n), Width: m}
		_, _ = pl.String(), pl.Below(pcie.LinkRate{Speed: float64(m), Width: n})
		cpus := pcie.CPUList{n, m}
		_ = cpus.String()
		_, _ = cpus.MarshalText()
		k, l := topology.Kind(n), topology.Link(m)
		_, _ = k.String(), l.String()
		_, _ = k.MarshalText()
		_, _ = l.MarshalText()
		g := efa.Generation(bits)
		_ = g.String()
		_, _ = g.MarshalText()
		_ = health.Grade(n).String()
		s := gpudirect.Status(n)
		_, _ = s.String(), s.Usable()
		_, _ = s.MarshalText()
		var p gpudirect.Pair
		_, _ = p.ReadyBy(), p.Reasons()
		p.Paths = []gpudirect.Path{{Status: s, Findings: []gpudirect.Finding{{Status: gpudirect.Status(m)}}}}
		_, _ = p.ReadyBy(), p.Reasons()
		for _, e := range []*sysfs.Error{{}, {Subsystem: name, Device: other, File: addr}, {Device: name, Err: sysfs.ErrTooLarge}} {
			_, _ = e.Error(), e.Unwrap()
		}
	})
}

// TestZeroValuesAreUnknown: the zero value of an enum is no verdict.
func TestZeroValuesAreUnknown(t *testing.T) {
	assert.Equal(t, topology.LinkUnknown, topology.Link(0))
	assert.Equal(t, "?", topology.Link(0).String())
	assert.Equal(t, "Kind(0)", topology.Kind(0).String())
	assert.Equal(t, "Kind(3)"[:5], topology.Kind(7).String()[:5])
	assert.Equal(t, gpudirect.Unknown, gpudirect.Status(0))
	assert.False(t, gpudirect.Status(0).Usable())
	var p gpudirect.Pair
	assert.Equal(t, "unknown ?", p.Status.String()+" "+p.Link.String(), "an empty pair is no verdict")
	assert.Equal(t, "Link(7)", topology.Link(7).String())
	assert.Equal(t, "Status(9)", gpudirect.Status(9).String())
}
