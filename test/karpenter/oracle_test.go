package karpenter

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aws/karpenter-provider-aws/pkg/providers/drametadata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/internal/fixturegen/machines"
	"github.com/efakit/efakit/internal/fleet"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/topology"
)

var update = flag.Bool("update", false, "rewrite "+reportPath)

// reportPath is the generated report, from this package.
const reportPath = "../../docs/karpenter-agreement.md"

// pin is the release whose tables the test reads; go.mod requires it.
const pin = "v1.15.2"

// disputed are the instance types where the docs argue that Karpenter's
// data, not efakit's model, is wrong: type -> the attributes that differ
// and why. The test fails when such a type agrees (the entry is stale) or
// differs elsewhere. None today: where the data disagreed, the models were
// wrong (docs/karpenter.md).
var disputed = map[string]string{}

// Attribute names as Karpenter's tables write them, fully qualified.
const (
	pcieRoot     = "resource.kubernetes.io/pcieRoot"
	numaNode     = "dra.net/numaNode"
	pciSubsystem = "dra.net/pciSubsystem"
	pciDevice    = "dra.net/pciDevice"
	pciVendor    = "dra.net/pciVendor"
	rdma         = "dra.net/rdma"
)

// compared returns the attributes compared on t. Karpenter's tables give
// the platform attributes (root, NUMA node, subsystem) only for the GPU
// types, where it pairs EFAs with GPUs; for the others they hold the
// device, the vendor and rdma alone, so absent there means not recorded.
func compared(t string) []string {
	if _, ok := drametadata.GPUMetadataByInstanceType[t]; ok {
		return []string{pcieRoot, numaNode, pciSubsystem, pciDevice, pciVendor, rdma}
	}
	return []string{pciDevice, pciVendor, rdma}
}

// view is one side's answer for an instance type: the EFA count, each
// compared attribute's values over the EFAs (sorted, "-" where a device
// has none), the GPUs' roots, and per GPU how many EFAs share its root.
type view struct {
	efas     int
	attrs    map[string][]string
	gpuRoots []string
	sharing  []string
}

func value(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValues != nil:
		return fmt.Sprint(a.IntValues)
	}
	return "?"
}

// qualified is an attribute's full name: an unqualified one is in the
// driver's domain, as the API reads it.
func qualified(driver string, n resourceapi.QualifiedName) string {
	if strings.Contains(string(n), "/") {
		return string(n)
	}
	return driver + "/" + string(n)
}

func newView(t string, efas []map[string]string, gpuRoots []string) view {
	v := view{efas: len(efas), attrs: map[string][]string{}, gpuRoots: slices.Sorted(slices.Values(gpuRoots))}
	for _, k := range compared(t) {
		var vals []string
		for _, e := range efas {
			if s, ok := e[k]; ok {
				vals = append(vals, s)
			} else {
				vals = append(vals, "-")
			}
		}
		slices.Sort(vals)
		v.attrs[k] = vals
	}
	for _, r := range gpuRoots {
		n := 0
		for _, e := range efas {
			if e[pcieRoot] == r {
				n++
			}
		}
		v.sharing = append(v.sharing, fmt.Sprint(n))
	}
	slices.Sort(v.sharing)
	return v
}

// karpenterView reads the pinned tables; ok is false when they have no
// EFA entry for t.
func karpenterView(tb testing.TB, t string) (view, bool) {
	m, ok := drametadata.EFAMetadataByInstanceType[t]
	if !ok {
		return view{}, false
	}
	require.Len(tb, m.Devices, m.Count, "%s: Karpenter's count and its devices", t)
	var efas []map[string]string
	for _, d := range m.Devices {
		e := map[string]string{}
		for k, a := range d.Attributes {
			e[string(k)] = value(a)
		}
		efas = append(efas, e)
	}
	var roots []string
	if g, ok := drametadata.GPUMetadataByInstanceType[t]; ok {
		for _, d := range g.Devices {
			if a, ok := d.Attributes[pcieRoot]; ok {
				roots = append(roots, value(a))
			}
		}
	}
	return newView(t, efas, roots), true
}

// efakitView builds t's sysfs, scans it and reads the dra.net devices the
// plugin would publish with cfg (resources.Build and Slices, as the plugin
// and `efakit slices` call them) and the GPUs' roots from the topology.
func efakitView(tb testing.TB, t string, cfg resources.Config) view {
	m, err := machines.Build(t)
	require.NoError(tb, err)
	root, err := m.Root()
	require.NoError(tb, err)
	topo, err := topology.Scan(root)
	require.NoError(tb, err, "%s: scan", t)
	pool, err := resources.Build(topo, cfg)
	require.NoError(tb, err, "%s: slices", t)
	var efas []map[string]string
	for _, s := range resources.Slices(pool, cfg) {
		if s.Spec.Driver != "dra.net" {
			continue
		}
		for _, d := range s.Spec.Devices {
			e := map[string]string{}
			for k, a := range d.Attributes {
				e[qualified(s.Spec.Driver, k)] = value(a)
			}
			efas = append(efas, e)
		}
	}
	var roots []string
	for _, g := range topo.Of(topology.KindGPU) {
		if std, ok := topo.StandardAttributes(g); ok {
			roots = append(roots, std.PCIeRoot)
		}
	}
	return newView(t, efas, roots)
}

// multiset prints sorted values as "a×2 b×1".
func multiset(vals []string) string {
	if len(vals) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(vals); {
		j := i
		for j < len(vals) && vals[j] == vals[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s×%d", vals[i], j-i))
		i = j
	}
	return strings.Join(parts, " ")
}

// differences says what differs between efakit's view and Karpenter's:
// "numaNode: efakit 0×16 1×16; Karpenter 0×8 1×8 2×8 3×8".
func differences(t string, got, want view) []string {
	var out []string
	if got.efas != want.efas {
		out = append(out, fmt.Sprintf("EFAs: efakit %d; Karpenter %d", got.efas, want.efas))
	}
	for _, k := range compared(t) {
		if !slices.Equal(got.attrs[k], want.attrs[k]) {
			out = append(out, fmt.Sprintf("%s: efakit %s; Karpenter %s", short(k), multiset(got.attrs[k]), multiset(want.attrs[k])))
		}
	}
	if _, ok := drametadata.GPUMetadataByInstanceType[t]; ok {
		if !slices.Equal(got.gpuRoots, want.gpuRoots) {
			out = append(out, fmt.Sprintf("GPU roots: efakit %s; Karpenter %s", multiset(got.gpuRoots), multiset(want.gpuRoots)))
		}
		if !slices.Equal(got.sharing, want.sharing) {
			out = append(out, fmt.Sprintf("EFAs on each GPU's root: efakit %s; Karpenter %s", multiset(got.sharing), multiset(want.sharing)))
		}
	}
	return out
}

func short(k string) string { return k[strings.LastIndex(k, "/")+1:] }

// row is one built instance type's line of the report.
type row struct {
	name, bundled, efas, gpus, result string
}

// TestAgainstKarpenter compares every type the models build with the
// pinned tables, and keeps docs/karpenter-agreement.md current.
func TestAgainstKarpenter(t *testing.T) {
	var rows []row
	agree, differ, noEntry := 0, 0, 0
	for _, name := range machines.Types() {
		m, err := machines.Build(name)
		require.NoError(t, err)
		got := efakitView(t, name, resources.Config{NodeName: "node"})
		// The list form of the standard numaNode (DRAListTypeAttributes)
		// leaves dra.net/numaNode a number.
		assert.Equal(t, got, efakitView(t, name, resources.Config{NodeName: "node", NUMAList: true}), "%s: with NUMAList", name)
		r := row{name: name, bundled: "generated", efas: fmt.Sprint(got.efas), gpus: fmt.Sprint(len(got.gpuRoots))}
		if m.Bundled {
			r.bundled = "bundled"
		}
		want, ok := karpenterView(t, name)
		switch d := differences(name, got, want); {
		case !ok:
			noEntry++
			r.result = "no entry in Karpenter's tables"
			if got.efas > 0 {
				r.result += fmt.Sprintf(" (efakit: %d EFAs)", got.efas)
			}
		case len(d) == 0:
			agree++
			r.result = "agrees: " + strings.Join(checked(name), ", ")
			assert.NotContains(t, disputed, name, "%s agrees: its disputed entry is stale", name)
		default:
			differ++
			r.result = "**differs**: " + strings.Join(d, "; ")
			if why, ok := disputed[name]; ok {
				r.result += " (disputed: " + why + ")"
			} else {
				t.Errorf("%s differs from Karpenter %s's real-node data: %s", name, pin, strings.Join(d, "; "))
			}
		}
		rows = append(rows, r)
	}

	inFleet := map[string]bool{}
	source := map[string]fleet.Source{}
	for _, f := range fleet.Families() {
		for _, it := range f.InstanceTypes() {
			inFleet[it] = true
			source[it] = f.Src
		}
	}
	var onlyKarpenter, onlyFleet []string
	both := 0
	for it := range drametadata.EFAMetadataByInstanceType {
		if inFleet[it] {
			both++
		} else {
			onlyKarpenter = append(onlyKarpenter, it)
		}
	}
	for it := range inFleet {
		if _, ok := drametadata.EFAMetadataByInstanceType[it]; !ok {
			onlyFleet = append(onlyFleet, it)
		}
	}
	slices.Sort(onlyKarpenter)
	slices.Sort(onlyFleet)
	for i, it := range onlyFleet {
		onlyFleet[i] = fmt.Sprintf("%s (%s)", it, source[it])
	}
	// The chart selects the fleet table's types: a type Karpenter knows to
	// have EFA and the table lacks gets no plugin.
	assert.Empty(t, onlyKarpenter, "types with EFA in Karpenter's tables and not in internal/fleet: the chart never runs there")

	got := render(rows, agree, differ, noEntry, both, onlyKarpenter, onlyFleet)
	if *update {
		require.NoError(t, os.WriteFile(reportPath, got, 0o644))
		return
	}
	have, err := os.ReadFile(reportPath)
	require.NoError(t, err)
	if !bytes.Equal(have, got) {
		t.Errorf("%s is stale: run `make karpenter-update` (GOTOOLCHAIN=go1.27.3 go test ./... -update in test/karpenter)", reportPath)
	}
}

// checked names what was compared on t, for the report.
func checked(t string) []string {
	out := []string{"count"}
	for _, k := range compared(t) {
		out = append(out, short(k))
	}
	if _, ok := drametadata.GPUMetadataByInstanceType[t]; ok {
		out = append(out, "GPU roots", "EFAs on each GPU's root")
	}
	return out
}

func render(rows []row, agree, differ, noEntry, both int, onlyKarpenter, onlyFleet []string) []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, `# efakit against Karpenter's real-node data

Generated by the test of test/karpenter (`+"`make karpenter`"+` compares, `+"`make karpenter-update`"+`
rewrites); do not edit. It reads the tables of
`+"`github.com/aws/karpenter-provider-aws/pkg/providers/drametadata`"+` at %s: per EC2 instance type,
the dra.net EFA devices and the NVIDIA GPU devices that the drivers published on a real node. For
every instance type efakit's fixture models build, it generates the sysfs tree, scans it, builds
the ResourceSlices the plugin publishes, and compares: the EFA count; over the EFAs, the values of
pcieRoot, numaNode, pciSubsystem, pciDevice, pciVendor and rdma; the GPUs' roots; and how many EFAs
share each GPU's root. Karpenter's tables give the root, the NUMA node and the subsystem only for
GPU instance types, so elsewhere only the count, the device, the vendor and rdma are compared.
What the comparison means and where the data came from: [karpenter.md](karpenter.md).

%d types built: %d agree, %d differ, %d have no entry in Karpenter's tables.

| instance type | fixture | EFAs | GPUs | result |
|---|---|---|---|---|
`, pin, len(rows), agree, differ, noEntry)
	for _, r := range rows {
		fmt.Fprintf(&w, "| %s | %s | %s | %s | %s |\n", r.name, r.bundled, r.efas, r.gpus, r.result)
	}
	fmt.Fprintf(&w, `
## Which types have EFA

internal/fleet (the chart's node selection) and Karpenter's tables: %d types in both, %d only in
Karpenter's, %d only in internal/fleet.

| list | instance types |
|---|---|
| only Karpenter's | %s |
| only internal/fleet | %s |
`, both, len(onlyKarpenter), len(onlyFleet), orNone(onlyKarpenter), orNone(onlyFleet))
	return w.Bytes()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// TestTablesShape guards the reading of the tables: the attribute names
// the comparison uses are the ones the tables hold.
func TestTablesShape(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range drametadata.EFAMetadataByInstanceType {
		for _, d := range m.Devices {
			for k := range d.Attributes {
				seen[string(k)] = true
			}
		}
	}
	assert.Equal(t, []string{numaNode, pciDevice, pciSubsystem, pciVendor, rdma, pcieRoot}, sortedKeys(seen))
}

func sortedKeys(m map[string]bool) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int { return strings.Compare(a, b) })
}
