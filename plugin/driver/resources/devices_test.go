package resources_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

func TestResourcesOfEveryFixture(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "../../..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(path)
			require.NoError(t, err)
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			for _, list := range []bool{false, true} {
				cfg := resources.Config{NodeName: "n", NUMAList: list}
				res, err := resources.Build(topo, cfg)
				require.NoError(t, err)
				slices := resources.Slices(res, cfg)
				require.NotEmpty(t, slices, "an empty pool is still published")
				total := 0
				for _, s := range slices {
					assert.LessOrEqual(t, len(s.Spec.Devices), resources.MaxDevicesPerSlice)
					assert.Equal(t, "n", s.Spec.Pool.Name)
					assert.Equal(t, int64(len(slices)), s.Spec.Pool.ResourceSliceCount)
					for _, d := range s.Spec.Devices {
						require.NoError(t, resources.CheckDevice(d))
						// Every attribute a shipped class reads is there.
						assert.Equal(t, "Elastic Fabric Adapter (EFA)", *d.Attributes[resources.AttrPCIDevice].StringValue)
						assert.True(t, strings.HasPrefix(d.Name, "efa-"))
						total++
					}
				}
				assert.Equal(t, len(topo.Of(topology.KindEFA)), total)
			}
		})
	}
}

func TestEFADeviceAttributes(t *testing.T) {
	t.Parallel()
	root, err := sysfs.Open("../../../testdata/sysfs/trn1.32xlarge.sysfs")
	require.NoError(t, err)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	a, _ := pcie.ParseAddress("0000:10:19.0")
	d, err := resources.EFADevice(topo, topo.Lookup(a), resources.Config{NodeName: "n"})
	require.NoError(t, err)
	assert.Equal(t, "efa-0000-10-19-0", d.Name)
	s := func(n resourceapi.QualifiedName) string { return *d.Attributes[n].StringValue }
	assert.Equal(t, "pci0000:10", s(resources.AttrPCIeRoot))
	assert.Equal(t, "0000:10:19.0", s(resources.AttrPCIBusID))
	assert.Equal(t, "0000:10:19.0", s(resources.AttrPCIAddr))
	assert.Equal(t, "178a9e264a26793e", s(resources.AttrGroup4))
	assert.Equal(t, "rdmap16s25", s(resources.AttrRDMADev))
	assert.Equal(t, "efa1", s(resources.AttrPCISubsys))
	assert.Equal(t, "Amazon.com, Inc.", s(resources.AttrPCIVendor))
	assert.True(t, *d.Attributes[resources.AttrRDMA].BoolValue)
	assert.Equal(t, int64(0), *d.Attributes[resources.AttrNUMANode].IntValue)
	// Published: exactly the attributes with a stated user (docs/plugin.md,
	// "What is published").
	assert.ElementsMatch(t, []resourceapi.QualifiedName{resources.AttrPCIeRoot, resources.AttrPCIBusID, resources.AttrNUMANode,
		resources.AttrGroup1, resources.AttrGroup4, resources.AttrGroup8, resources.AttrGroup16,
		resources.AttrPCIAddr, resources.AttrPCIVendor, resources.AttrPCIDevice, resources.AttrPCISubsys, resources.AttrNUMALocal,
		resources.AttrRDMA, resources.AttrRDMADev, resources.AttrKind}, slices.Collect(maps.Keys(d.Attributes)))
	// The metadata a container reads: those and the metadata-only ones.
	m, err := resources.EFAMetadata(topo, topo.Lookup(a), resources.Config{NodeName: "n"})
	require.NoError(t, err)
	for n, v := range d.Attributes {
		assert.Equal(t, v, m[n], "%s in the metadata as published", n)
	}
	ms := func(n resourceapi.QualifiedName) string { return *m[n].StringValue }
	assert.Equal(t, "0000:10:1c.0,0000:10:1d.0", ms(resources.AttrAccel))
	assert.Equal(t, "neuron", ms(resources.AttrAccelKind))
	assert.Equal(t, "uverbs0", ms(resources.AttrUverbs))
	assert.Equal(t, "enp16s1", ms(resources.AttrNetdev))
	assert.Equal(t, "efa1", ms(resources.AttrGen))
	assert.Equal(t, int64(100), *m[resources.AttrRate].IntValue)
	assert.Len(t, m, len(d.Attributes)+6, "efaGeneration, linkRateGbps, uverbsDevice, netdev, accelerators, acceleratorKind")

	// No NUMA: neither numaNode is published.
	g5, err := sysfs.Open("../../../testdata/sysfs/g5.8xlarge.sysfs")
	require.NoError(t, err)
	topo, err = topology.Scan(g5)
	require.NoError(t, err)
	d, err = resources.EFADevice(topo, topo.ByName("efa_0"), resources.Config{})
	require.NoError(t, err)
	assert.NotContains(t, d.Attributes, resources.AttrNUMANode)
	assert.NotContains(t, d.Attributes, resources.AttrNUMALocal)
	assert.NotContains(t, d.Attributes, resources.AttrGroup1, "no device groups off Trainium")
}

func TestCheckDeviceLimits(t *testing.T) {
	t.Parallel()
	v := "x"
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for i := range resources.MaxAttributesAndCapacities {
		attrs[resourceapi.QualifiedName(fmt.Sprintf("a%d", i))] = resourceapi.DeviceAttribute{StringValue: &v}
	}
	assert.NoError(t, resources.CheckDevice(resourceapi.Device{Name: "ok", Attributes: attrs}))
	attrs["one_more"] = resourceapi.DeviceAttribute{StringValue: &v}
	assert.ErrorContains(t, resources.CheckDevice(resourceapi.Device{Name: "ok", Attributes: attrs}), "33 attributes")

	long := strings.Repeat("x", 65)
	for _, tc := range []struct {
		d    resourceapi.Device
		want string
	}{
		{resourceapi.Device{Name: "Bad_Name"}, "name"},
		{resourceapi.Device{Name: "ok", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"s": {StringValue: &long}}}, "65 characters"},
		{resourceapi.Device{Name: "ok", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"bad-id": {StringValue: &v}}}, "C identifier"},
		{resourceapi.Device{Name: "ok", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"Bad_Domain/x": {StringValue: &v}}}, "domain"},
		{resourceapi.Device{Name: "ok", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"none": {}}}, "0 values"},
	} {
		assert.ErrorContains(t, resources.CheckDevice(tc.d), tc.want)
	}
}

// TestSlicesSplit: past 128 devices the pool takes a second slice.
func TestSlicesSplit(t *testing.T) {
	t.Parallel()
	b := fakesys.New()
	for i := range 130 {
		addr := fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32)
		b.AddPCI(fakesys.PCI{Addr: addr, Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: -1, CPUs: "0"})
		b.AddEFA(fakesys.EFA{Addr: addr, IBName: fmt.Sprintf("efa_%d", i), Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0000"})
	}
	topo, err := topology.Scan(b.FS())
	require.NoError(t, err)
	cfg := resources.Config{NodeName: "n"}
	res, err := resources.Build(topo, cfg)
	require.NoError(t, err)
	slices := resources.Slices(res, cfg)
	require.Len(t, slices, 2)
	assert.Len(t, slices[0].Spec.Devices, 128)
	assert.Len(t, slices[1].Spec.Devices, 2)
	assert.Equal(t, "0-dra.net-n-", slices[0].GenerateName)
	assert.Equal(t, "1-dra.net-n-", slices[1].GenerateName)
}

func TestDeviceClasses(t *testing.T) {
	t.Parallel()
	c := resources.DeviceClasses(resources.ClassOptions{})
	require.Len(t, c, 2)
	assert.Equal(t, "efa-group.networking.k8s.aws", c[1].Name)
	// AWS's class, as AWS ships it.
	assert.Equal(t, "efa.networking.k8s.aws", c[0].Name)
	assert.Equal(t, `device.driver == "dra.net" && device.attributes["dra.net"].pciDevice == "Elastic Fabric Adapter (EFA)"`, c[0].Spec.Selectors[0].CEL.Expression)
	o := resources.DeviceClasses(resources.ClassOptions{DriverName: "efa.example.com", ClassName: "efa.example.com"})
	assert.Contains(t, o[0].Spec.Selectors[0].CEL.Expression, `device.attributes["efa.example.com"]`)
}

// TestGroupResourcesWithinLimits: group devices in both modes pass the
// API's limits; mixed slices hold at most 64 devices and 8 counter sets,
// each set one counter per member, consumed by its single and its group.
func TestGroupResourcesWithinLimits(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "../../..") {
		for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				root, err := sysfs.Open(path)
				require.NoError(t, err)
				topo, err := topology.Scan(root)
				require.NoError(t, err)
				cfg := resources.Config{NodeName: "n", Groups: mode}
				res, err := resources.Build(topo, cfg)
				require.NoError(t, err)
				groups, singles, consumers := 0, 0, map[string]int{}
				for _, s := range resources.Slices(res, cfg) {
					assert.False(t, len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0, "devices or counters, not both")
					assert.LessOrEqual(t, len(s.Spec.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
					if mode == resources.GroupsMixed {
						assert.LessOrEqual(t, len(s.Spec.Devices), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
					}
					for _, d := range s.Spec.Devices {
						require.NoError(t, resources.CheckDevice(d))
						assert.NotEmpty(t, *d.Attributes[resources.AttrPCIDevice].StringValue, "every class's attribute is there")
						assert.NotEmpty(t, *d.Attributes[resources.AttrKind].StringValue)
						if strings.HasPrefix(d.Name, "efa-group-") {
							groups++
							assert.Equal(t, resources.GroupPCIDevice, *d.Attributes[resources.AttrPCIDevice].StringValue)
						} else {
							singles++
						}
						for _, c := range d.ConsumesCounters {
							for counter := range c.Counters {
								consumers[counter]++
							}
						}
					}
				}
				nEFA := len(topo.Of(topology.KindEFA))
				if nEFA == 0 {
					assert.Zero(t, groups+singles)
					return
				}
				assert.NotZero(t, groups)
				if mode == resources.GroupsExclusive {
					assert.Zero(t, singles)
					assert.Empty(t, consumers, "no counters in exclusive mode")
				} else {
					assert.Equal(t, nEFA, singles)
					require.Len(t, consumers, nEFA)
					for counter, n := range consumers {
						assert.Equal(t, 2, n, "%s: its single and its group", counter)
					}
				}
			})
		}
	}
}
