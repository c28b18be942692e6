package driver

import (
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/driver/resources"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// What the plugin publishes is built in package resources, which links no
// client, gRPC or metrics, so that `efakit slices` and `efakit claims`
// print the same objects without the plugin. These names keep driver's
// API as it was.

// Config says how devices are named and published (resources.Config).
type Config resources.Config

// driverName is the driver name, DefaultDriverName when empty.
func (c Config) driverName() string { return resources.Config(c).Driver() }

// TaintKey is the key of the NoSchedule taint an unhealthy device carries.
func (c Config) TaintKey() string { return resources.Config(c).TaintKey() }

// Defaults, limits and attribute names: see package resources.
const (
	DefaultDriverName          = resources.DefaultDriverName
	DefaultDeviceClass         = resources.DefaultDeviceClass
	DefaultGroupDeviceClass    = resources.DefaultGroupDeviceClass
	GPUDeviceClass             = resources.GPUDeviceClass
	NeuronDeviceClass          = resources.NeuronDeviceClass
	MaxAttributesAndCapacities = resources.MaxAttributesAndCapacities
	MaxDevicesPerSlice         = resources.MaxDevicesPerSlice
	DevicePluginResource       = resources.DevicePluginResource
	AutoModeLabel              = resources.AutoModeLabel
	AutoModeValue              = resources.AutoModeValue
	GroupPCIDevice             = resources.GroupPCIDevice

	AttrPCIeRoot  = resources.AttrPCIeRoot
	AttrPCIBusID  = resources.AttrPCIBusID
	AttrNUMANode  = resources.AttrNUMANode
	AttrGroup1    = resources.AttrGroup1
	AttrGroup4    = resources.AttrGroup4
	AttrGroup8    = resources.AttrGroup8
	AttrGroup16   = resources.AttrGroup16
	AttrPCIAddr   = resources.AttrPCIAddr
	AttrPCIVendor = resources.AttrPCIVendor
	AttrPCIDevice = resources.AttrPCIDevice
	AttrPCISubsys = resources.AttrPCISubsys
	AttrNUMALocal = resources.AttrNUMALocal
	AttrRDMA      = resources.AttrRDMA
	AttrRDMADev   = resources.AttrRDMADev
	AttrVirtual   = resources.AttrVirtual
	AttrKind      = resources.AttrKind
	AttrUverbs    = resources.AttrUverbs
	AttrAccel     = resources.AttrAccel
	AttrMembers   = resources.AttrMembers
)

// GroupMode says whether a node publishes EFA group devices.
type GroupMode = resources.GroupMode

// The group modes.
const (
	GroupsNone      = resources.GroupsNone
	GroupsExclusive = resources.GroupsExclusive
	GroupsMixed     = resources.GroupsMixed
)

// Template and AllPod are what ClaimTemplates suggests.
type (
	Template = resources.Template
	AllPod   = resources.AllPod
)

// EnvMode and EFAConfig are the opaque configuration of a request.
type (
	EnvMode   = resources.EnvMode
	EFAConfig = resources.EFAConfig
)

// The environment modes.
const (
	EnvNone      = resources.EnvNone
	EnvLibfabric = resources.EnvLibfabric
)

// ParseGroupMode parses the --groups flag: none, exclusive or mixed.
func ParseGroupMode(s string) (GroupMode, error) { return resources.ParseGroupMode(s) }

// DecodeConfig parses opaque parameters strictly (resources.DecodeConfig).
func DecodeConfig(raw []byte) (EFAConfig, error) { return resources.DecodeConfig(raw) }

// DeviceName is an EFA's device name ("efa-0000-4f-00-0").
func DeviceName(a pcie.Address) string { return resources.DeviceName(a) }

// GroupDeviceName is a group's device name ("efa-group-pci0000-44").
func GroupDeviceName(root string) string { return resources.GroupDeviceName(root) }

// CheckDevice checks a device against the API's limits.
func CheckDevice(d resourceapi.Device) error { return resources.CheckDevice(d) }

// DeviceClasses are the classes the project ships.
func DeviceClasses(driverName, className string) []*resourceapi.DeviceClass {
	return resources.DeviceClasses(driverName, className)
}

// ClaimTemplates are the claims that fit the machine of t.
func ClaimTemplates(t *topology.Topology, mode GroupMode, efaClass string) ([]Template, *AllPod) {
	return resources.ClaimTemplates(t, mode, efaClass)
}

// OwnSlice reports whether a ResourceSlice of driverName is one efakit
// writes.
func OwnSlice(s *resourceapi.ResourceSlice, driverName string) bool {
	return resources.OwnSlice(s, driverName)
}

// ForeignSlices names the slices of driverName on node that efakit did not
// write.
func ForeignSlices(l []resourceapi.ResourceSlice, driverName, node string) []string {
	return resources.ForeignSlices(l, driverName, node)
}

// Resources are the devices of the node's pool (resources.Build), in the
// form kubeletplugin.Helper.PublishResources takes. names is not used:
// nothing published depends on the machine's pci.ids.
func Resources(t *topology.Topology, _ *pcie.Names, cfg Config) (resourceslice.DriverResources, error) {
	pool, err := resources.Build(t, resources.Config(cfg))
	return driverResources(pool), err
}

// PublishedResources are the devices as the plugin publishes them for the
// topology, unhealthy ones tainted (resources.Published). names is not
// used.
func PublishedResources(t *topology.Topology, _ *pcie.Names, cfg Config) (resourceslice.DriverResources, error) {
	pool, err := resources.Published(t, resources.Config(cfg))
	return driverResources(pool), err
}

// Slices turns DriverResources into the ResourceSlice objects the kubelet
// plugin's controller creates for a node (resources.Slices), pools in
// name order.
func Slices(res resourceslice.DriverResources, cfg Config) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, name := range slices.Sorted(maps.Keys(res.Pools)) {
		out = append(out, resources.Slices(poolOf(name, res.Pools[name]), resources.Config(cfg))...)
	}
	return out
}

// driverResources is a pool in the form the kubelet plugin helper takes.
func driverResources(p resources.Pool) resourceslice.DriverResources {
	pool := resourceslice.Pool{Generation: p.Generation, Slices: make([]resourceslice.Slice, len(p.Slices))}
	for i, s := range p.Slices {
		pool.Slices[i] = resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{p.Name: pool}}
}

// poolOf is the pool of the helper's form named name.
func poolOf(name string, p resourceslice.Pool) resources.Pool {
	out := resources.Pool{Name: name, Generation: p.Generation, Slices: make([]resources.Slice, len(p.Slices))}
	for i, s := range p.Slices {
		out.Slices[i] = resources.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return out
}
