package resources_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/efakit/efakit/driver/resources"
	"github.com/efakit/efakit/internal/allocfeatures"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// Karpenter's model of what dra.net publishes, written out by hand from
// github.com/aws/karpenter-provider-aws. With the feature gate DRAEFA
// (Helm: settings.enableDRA, or settings.awsFeatureGates.draEFA) Karpenter
// simulates a claim against one dra.net ResourceSlice per instance type
// before it launches a node: pool "network", devices "efa-0" ... "efa-<n-1>"
// (names of its own: the claim is allocated on the node, under the
// driver's names), no capacity, and the attributes below under their fully
// qualified names, which CEL reads as device.attributes["dra.net"].pciVendor
// and device.attributes["resource.kubernetes.io"].pcieRoot, as it reads
// efakit's unqualified names of a dra.net slice.
//
// Read from:
//   - pkg/providers/drametadata/zz_generated_efa_metadata.go: a generated
//     table of what the driver published on real nodes, by instance type
//     (the version of 29 types; the earlier versions, at a287932c and
//     76b7a0c3, held the g6 sizes only). The counts are that table's, not
//     EC2's EfaInfo.
//   - pkg/providers/efadra/efadra.go (1e9c33d4): one device per row of the
//     table, and nothing else: no ENA, no dranet network interface.
//   - pkg/cloudprovider/dynamicresources.go (1e9c33d4): the DRAEFA gate.
//   - website/content/en/preview/tasks/dra.md (c68a382d, 974b272f): the
//     same counts, and which attributes a claim may select on (pciDevice,
//     pciVendor, pciSubsystem, rdma, numaNode) and which it may only match
//     (pcieRoot: "specific to a platform").
//
// No release has it: v1.14.1 (main at 1d927085, 2026-08-21) has neither
// DRAEFA nor dra.net. It is the work of pull request #9550 ("feat: nvidia
// and efa driver dra support", a draft opened 2026-08-29) and the preview
// docs.
const (
	karpenterVendor = "Amazon.com, Inc."
	karpenterDevice = "Elastic Fabric Adapter (EFA)"
	noNUMA          = -1 // the model has no dra.net/numaNode (single-NUMA types)
)

// karpenterType is the model of one instance type: count EFAs, each with
// pciVendor karpenterVendor, pciDevice karpenterDevice, and the
// pciSubsystem and rdma given, by PCIe root.
type karpenterType struct {
	count     int
	subsystem string
	rdma      bool
	roots     []karpenterRoot
}

// karpenterRoot is the EFAs of one PCIe root: their
// resource.kubernetes.io/pcieRoot and dra.net/numaNode.
type karpenterRoot struct {
	root string
	numa int
	efas int
}

func one(subsystem, root string) karpenterType {
	return karpenterType{count: 1, subsystem: subsystem, rdma: true, roots: []karpenterRoot{{root, noNUMA, 1}}}
}

var karpenterModel = map[string]karpenterType{
	"g4dn.8xlarge":  one("efa0", "pci0000:00"),
	"g4dn.12xlarge": one("efa0", "pci0000:00"),
	"g4dn.16xlarge": one("efa0", "pci0000:00"),
	// The only type whose EFA the model says has no RDMA.
	"g4dn.metal":   {count: 1, subsystem: "efa0", rdma: false, roots: []karpenterRoot{{"pci0000:c2", 1, 1}}},
	"g5.8xlarge":   one("efa0", "pci0000:00"),
	"g5.12xlarge":  one("efa0", "pci0000:00"),
	"g5.16xlarge":  one("efa0", "pci0000:00"),
	"g5.24xlarge":  one("efa0", "pci0000:00"),
	"g5.48xlarge":  one("efa0", "pci0000:00"),
	"g6.8xlarge":   one("efa1", "pci0000:24"),
	"g6.12xlarge":  one("efa1", "pci0000:24"),
	"g6.16xlarge":  one("efa1", "pci0000:34"),
	"g6.24xlarge":  one("efa1", "pci0000:44"),
	"g6.48xlarge":  {count: 1, subsystem: "efa1", rdma: true, roots: []karpenterRoot{{"pci0000:84", 0, 1}}},
	"g6e.8xlarge":  one("efa1", "pci0000:24"),
	"g6e.12xlarge": one("efa1", "pci0000:24"),
	"g6e.16xlarge": one("efa1", "pci0000:34"),
	"g6e.24xlarge": {count: 2, subsystem: "efa1", rdma: true, roots: []karpenterRoot{{"pci0000:44", noNUMA, 2}}},
	"g6e.48xlarge": {count: 4, subsystem: "efa1", rdma: true, roots: []karpenterRoot{
		{"pci0000:84", 0, 2}, {"pci0000:a5", 1, 2},
	}},
	"gr6.8xlarge":   one("efa1", "pci0000:24"),
	"p3dn.24xlarge": one("efa0", "pci0000:00"),
	"p4d.24xlarge":  {count: 4, subsystem: "efa0", rdma: true, roots: a100Roots},
	"p4de.24xlarge": {count: 4, subsystem: "efa0", rdma: true, roots: a100Roots},
	"p5.4xlarge":    one("efa1", "pci0000:24"),
	"p5.48xlarge": {count: 32, subsystem: "efa1", rdma: true, roots: []karpenterRoot{
		{"pci0000:44", 0, 4}, {"pci0000:55", 0, 4}, {"pci0000:66", 0, 4}, {"pci0000:77", 0, 4},
		{"pci0000:88", 1, 4}, {"pci0000:99", 1, 4}, {"pci0000:aa", 1, 4}, {"pci0000:bb", 1, 4},
	}},
	// Four NUMA nodes, not p5's two.
	"p5e.48xlarge": {count: 32, subsystem: "efa1", rdma: true, roots: []karpenterRoot{
		{"pci0000:66", 0, 4}, {"pci0000:77", 0, 4}, {"pci0000:44", 1, 4}, {"pci0000:55", 1, 4},
		{"pci0000:aa", 2, 4}, {"pci0000:bb", 2, 4}, {"pci0000:88", 3, 4}, {"pci0000:99", 3, 4},
	}},
	"p5en.48xlarge": {count: 16, subsystem: "efa2", rdma: true, roots: []karpenterRoot{
		{"pci0000:44", 0, 4}, {"pci0000:5d", 0, 4}, {"pci0000:76", 1, 4}, {"pci0000:8f", 1, 4},
	}},
	"p6-b200.48xlarge": {count: 8, subsystem: "efa3", rdma: true, roots: []karpenterRoot{
		{"pci0000:44", 0, 2}, {"pci0000:55", 0, 2}, {"pci0000:66", 1, 2}, {"pci0000:79", 1, 2},
	}},
	"p6-b300.48xlarge": {count: 16, subsystem: "efa3", rdma: true, roots: []karpenterRoot{
		{"pci0000:4b", 0, 2}, {"pci0000:5a", 0, 2}, {"pci0000:69", 0, 2}, {"pci0000:78", 0, 2},
		{"pci0000:87", 1, 2}, {"pci0000:96", 1, 2}, {"pci0000:a5", 1, 2}, {"pci0000:b4", 1, 2},
	}},
}

var a100Roots = []karpenterRoot{
	{"pci0000:10", 0, 1}, {"pci0000:20", 0, 1}, {"pci0000:90", 1, 1}, {"pci0000:a0", 1, 1},
}

// karpenterUnmodeled are the fixtures of instance types the model has no
// dra.net entry for: Karpenter never launches them for a claim of dra.net
// devices, whatever efakit publishes there. Not checked.
var karpenterUnmodeled = []string{"m5.xlarge", "p6e-gb200.36xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"}

// karpenterNoFixture are the instance types the model has and efakit has
// no fixture of. Not checked.
var karpenterNoFixture = []string{
	"g4dn.12xlarge", "g4dn.16xlarge", "g4dn.8xlarge", "g4dn.metal",
	"g5.12xlarge", "g5.16xlarge", "g5.24xlarge", "g5.48xlarge",
	"g6.12xlarge", "g6.16xlarge", "g6.24xlarge", "g6.48xlarge", "g6.8xlarge",
	"g6e.12xlarge", "g6e.16xlarge", "g6e.24xlarge", "g6e.48xlarge", "g6e.8xlarge",
	"gr6.8xlarge", "p3dn.24xlarge", "p5.4xlarge",
}

// karpenterNotAsserted are the values of a fixture that differ from the
// model and are left out pending review: the fixtures are synthetic
// (testdata/sysfs/README.md) and each of these values is inferred there,
// while the model's were read on real nodes. "pcieRoot" leaves out the
// root values only: how many EFAs share a root is still checked.
var karpenterNotAsserted = map[string][]string{
	"g5.8xlarge":       {"pciSubsystem"}, // the fixture's EFA is 1d0f:efa1 [inf], the model's efa0
	"p5e.48xlarge":     {"numaNode"},     // the fixture has p5's two NUMA nodes [inf], the model four
	"p6-b200.48xlarge": {"pcieRoot"},     // the fixture's fourth root is pci0000:77 [inf], the model's pci0000:79
	"p6-b300.48xlarge": {"pcieRoot"},     // the fixture's roots are pci0000:4a ... b3 [inf], the model's 4b ... b4
}

// karpenterClass is the class Karpenter's docs send EFA claims through
// (aws-dranet's efa.networking.k8s.aws).
var karpenterClass = fmt.Sprintf(`device.driver == "dra.net" && device.attributes["dra.net"].pciDevice == %q`, karpenterDevice)

// TestKarpenterModel checks every fixture of an instance type Karpenter's
// DRAEFA model has against it: as many dra.net devices as the model, all
// of them selected by the EFA class; on each, every attribute the model
// has, of its type and value, read through CEL as the scheduler compiles
// a selector; and the EFAs grouped by PCIe root as the model groups them.
// The fixtures the model lacks and the types without a fixture are named.
func TestKarpenterModel(t *testing.T) {
	t.Parallel()
	captures := testfixture.Captures(t, "../..")

	for name, m := range karpenterModel {
		sum := 0
		for _, r := range m.roots {
			sum += r.efas
		}
		assert.Equal(t, m.count, sum, "%s: the model's count and its devices", name)
	}
	var unmodeled, noFixture []string
	for name := range captures {
		if _, ok := karpenterModel[name]; !ok {
			unmodeled = append(unmodeled, name)
		}
	}
	for name := range karpenterModel {
		if _, ok := captures[name]; !ok {
			noFixture = append(noFixture, name)
		}
	}
	slices.Sort(unmodeled)
	slices.Sort(noFixture)
	assert.Equal(t, karpenterUnmodeled, unmodeled, "fixtures of types Karpenter does not model")
	assert.Equal(t, karpenterNoFixture, noFixture, "types Karpenter models without a fixture")
	for name := range karpenterNotAsserted {
		assert.Contains(t, karpenterModel, name)
		assert.Contains(t, captures, name)
	}

	cache := cel.NewCache(64, allocfeatures.CEL137())
	for _, name := range slices.Sorted(maps.Keys(captures)) {
		model, ok := karpenterModel[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(captures[name])
			require.NoError(t, err)
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			skip := karpenterNotAsserted[name]
			if len(skip) > 0 {
				t.Logf("not asserted (differs from the model, see karpenterNotAsserted): %s", strings.Join(skip, ", "))
			}
			for _, cfg := range []resources.Config{{NodeName: "n"}, {NodeName: "n", NUMAList: true}} {
				pool, err := resources.Build(topo, cfg)
				require.NoError(t, err)
				checkKarpenter(t, cache, model, skip, resources.Slices(pool, cfg), fmt.Sprintf("NUMAList %v", cfg.NUMAList))
			}
		})
	}
}

func checkKarpenter(t *testing.T, cache *cel.Cache, m karpenterType, skip []string, published []*resourceapi.ResourceSlice, mode string) {
	t.Helper()
	type efa struct {
		dev resourceapi.Device
		drv string
	}
	var efas []efa
	total := 0
	for _, s := range published {
		if s.Spec.Driver != "dra.net" {
			continue
		}
		for _, d := range s.Spec.Devices {
			total++
			if celSelects(t, cache, s.Spec.Driver, d, karpenterClass) {
				efas = append(efas, efa{d, s.Spec.Driver})
			}
		}
	}
	require.Equal(t, m.count, total, "%s: dra.net devices", mode)
	require.Len(t, efas, m.count, "%s: dra.net devices the EFA class selects", mode)

	byRoot := map[string][]resourceapi.Device{}
	for _, e := range efas {
		d, drv := e.dev, e.drv
		expect := func(expr string) {
			t.Helper()
			assert.True(t, celSelects(t, cache, drv, d, expr), "%s: %s: %s", mode, d.Name, expr)
		}
		expect(`type(device.attributes["dra.net"].pciVendor) == string`)
		expect(fmt.Sprintf(`device.attributes["dra.net"].pciVendor == %q`, karpenterVendor))
		expect(`type(device.attributes["dra.net"].pciDevice) == string`)
		expect(fmt.Sprintf(`device.attributes["dra.net"].pciDevice == %q`, karpenterDevice))
		expect(`type(device.attributes["dra.net"].pciSubsystem) == string`)
		if !slices.Contains(skip, "pciSubsystem") {
			expect(fmt.Sprintf(`device.attributes["dra.net"].pciSubsystem == %q`, m.subsystem))
		}
		expect(`type(device.attributes["dra.net"].rdma) == bool`)
		expect(fmt.Sprintf(`device.attributes["dra.net"].rdma == %v`, m.rdma))
		expect(`type(device.attributes["resource.kubernetes.io"].pcieRoot) == string`)
		r := celAttribute(d, drv, "resource.kubernetes.io", "pcieRoot")
		require.NotNil(t, r, "%s: %s has no pcieRoot", mode, d.Name)
		require.NotNil(t, r.StringValue, "%s: %s: pcieRoot", mode, d.Name)
		byRoot[*r.StringValue] = append(byRoot[*r.StringValue], d)
	}

	// The roots as the model has them, and as published: each root's EFA
	// count and NUMA node, and (where asserted) its name.
	numa := !slices.Contains(skip, "numaNode")
	names := !slices.Contains(skip, "pcieRoot")
	key := func(root string, node, n int) string {
		k := fmt.Sprintf("%d EFAs", n)
		if numa {
			k += fmt.Sprintf(", numaNode %d", node)
		}
		if names {
			k = root + ": " + k
		}
		return k
	}
	var want, got []string
	for _, r := range m.roots {
		want = append(want, key(r.root, r.numa, r.efas))
	}
	for root, devs := range byRoot {
		node := noNUMA
		for i, d := range devs {
			n := celNUMA(t, cache, "dra.net", d, mode)
			if i == 0 {
				node = n
			} else if n != node {
				t.Errorf("%s: %s: numaNode %d, %d on the root's other EFAs", mode, d.Name, n, node)
			}
		}
		got = append(got, key(root, node, len(devs)))
	}
	slices.Sort(want)
	slices.Sort(got)
	assert.Equal(t, want, got, "%s: EFAs by PCIe root", mode)
}

// celNUMA is the device's dra.net/numaNode as CEL reads it, noNUMA where
// it has none: an int, or the test fails.
func celNUMA(t *testing.T, cache *cel.Cache, drv string, d resourceapi.Device, mode string) int {
	t.Helper()
	if !celSelects(t, cache, drv, d, `"numaNode" in device.attributes["dra.net"]`) {
		return noNUMA
	}
	assert.True(t, celSelects(t, cache, drv, d, `type(device.attributes["dra.net"].numaNode) == int`), "%s: %s: numaNode is not an int", mode, d.Name)
	a := celAttribute(d, drv, "dra.net", "numaNode")
	if a == nil || a.IntValue == nil {
		t.Errorf("%s: %s: numaNode %+v", mode, d.Name, a)
		return noNUMA
	}
	assert.True(t, celSelects(t, cache, drv, d, fmt.Sprintf(`device.attributes["dra.net"].numaNode == %d`, *a.IntValue)), "%s: %s", mode, d.Name)
	return int(*a.IntValue)
}

// celSelects evaluates a selector on a device of driver drv, compiled as
// kube-scheduler compiles it.
func celSelects(t *testing.T, cache *cel.Cache, drv string, d resourceapi.Device, expr string) bool {
	t.Helper()
	c := cache.GetOrCompile(expr)
	if c.Error != nil {
		t.Fatalf("%s: %v", expr, c.Error)
	}
	ok, _, err := c.DeviceMatches(context.Background(), cel.Device{Driver: drv, Attributes: d.Attributes, Capacity: d.Capacity})
	if err != nil {
		t.Errorf("%s on %s: %v", expr, d.Name, err)
		return false
	}
	return ok
}

// celAttribute is the attribute CEL names device.attributes[domain].id: a
// name without a domain is in the driver's.
func celAttribute(d resourceapi.Device, drv, domain, id string) *resourceapi.DeviceAttribute {
	for name, a := range d.Attributes {
		dom, short, ok := strings.Cut(string(name), "/")
		if !ok {
			dom, short = drv, string(name)
		}
		if dom == domain && short == id {
			return &a
		}
	}
	return nil
}
