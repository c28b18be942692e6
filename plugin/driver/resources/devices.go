// Package resources is what efakit's DRA driver publishes, built from the
// topology alone: the devices and ResourceSlices of a node's EFAs (single,
// or grouped by PCIe root), their health taints, the DeviceClasses and
// ResourceClaimTemplates the project ships, the opaque claim configuration,
// and how to tell efakit's slices from another publisher's. It needs only
// the API types: no client, gRPC or metrics, so that `efakit slices` prints
// what the kubelet plugin (package driver) publishes, from the same
// functions, without linking the plugin.
package resources

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/efakit/efakit/internal/pciids"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// Defaults that make efakit a drop-in for AWS's EFA DRA driver.
const (
	DefaultDriverName  = "dra.net"
	DefaultDeviceClass = "efa.networking.k8s.aws"
)

// API limits a published device and slice must respect.
const (
	MaxAttributesAndCapacities = 32
	MaxStringLength            = 64
	MaxDevicesPerSlice         = 128
)

// Attribute names. Unqualified names are in the driver's own domain
// (device.attributes["dra.net"].rdma in CEL).
const (
	AttrPCIeRoot  = deviceattribute.StandardDeviceAttributePCIeRoot
	AttrPCIBusID  = deviceattribute.StandardDeviceAttributePCIBusID
	AttrNUMANode  = deviceattribute.StandardDeviceAttributeNUMANode
	AttrGroup1    = resourceapi.QualifiedName("resource.aws.com/devicegroup1_id")
	AttrGroup4    = resourceapi.QualifiedName("resource.aws.com/devicegroup4_id")
	AttrGroup8    = resourceapi.QualifiedName("resource.aws.com/devicegroup8_id")
	AttrGroup16   = resourceapi.QualifiedName("resource.aws.com/devicegroup16_id")
	AttrPCIAddr   = resourceapi.QualifiedName("pciAddress")
	AttrPCIVendor = resourceapi.QualifiedName("pciVendor")
	AttrPCIDevice = resourceapi.QualifiedName("pciDevice")
	AttrPCISubsys = resourceapi.QualifiedName("pciSubsystem")
	AttrNUMALocal = resourceapi.QualifiedName("numaNode")
	AttrRDMA      = resourceapi.QualifiedName("rdma")
	AttrRDMADev   = resourceapi.QualifiedName("rdmaDevice")
	AttrKind      = resourceapi.QualifiedName("kind")
	// Metadata only (MetadataOnly): in the device metadata file a
	// container reads, never in a ResourceSlice.
	AttrGen       = resourceapi.QualifiedName("efaGeneration")
	AttrRate      = resourceapi.QualifiedName("linkRateGbps")
	AttrUverbs    = resourceapi.QualifiedName("uverbsDevice")
	AttrNetdev    = resourceapi.QualifiedName("netdev")
	AttrAccel     = resourceapi.QualifiedName("accelerators")
	AttrAccelKind = resourceapi.QualifiedName("acceleratorKind")
)

// MetadataOnly are the attributes an EFA or group has in the device
// metadata its container reads (prepare writes them; the container
// contract and efakit doctor read uverbsDevice and members), and that are
// not published: no class, claim template, Karpenter model or dranet
// contract selects on them, and every published attribute is paid for by
// the scheduler and the API server on every node (docs/plugin.md,
// "What is published").
var MetadataOnly = []resourceapi.QualifiedName{AttrGen, AttrRate, AttrUverbs, AttrNetdev, AttrAccel, AttrAccelKind, AttrMembers, AttrMemberCount}

// published is attrs without the metadata-only ones.
func published(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := maps.Clone(attrs)
	for _, n := range MetadataOnly {
		delete(out, n)
	}
	return out
}

// KindEFA is the value of the kind attribute of a single-EFA device; a
// later kind (an EFA group) gets its own value, so classes can tell them
// apart.
const KindEFA = "efa"

// Config says how devices are named and published.
type Config struct {
	DriverName string // DefaultDriverName when empty
	NodeName   string // the pool's name and the slices' node
	// NUMAList publishes numaNode in list form (the cluster's
	// DRAListTypeAttributes gate); scalar otherwise.
	NUMAList bool
	// Groups adds "all EFAs of one PCIe root" devices: GroupsNone (the
	// default), GroupsExclusive or GroupsMixed.
	Groups GroupMode
	// Sharing lets independent claims share an EFA (SharingCapacity), each
	// taking shares of Shares (DefaultShares when 0); SharingNone (the
	// default) gives an EFA to one claim at a time. CheckSharing says which
	// combinations hold.
	Sharing SharingMode
	Shares  int64
	// UnhealthyEffect is the effect of an unhealthy device's taint:
	// NoSchedule when empty, or NoExecute (evicts the pods that use it
	// and do not tolerate it).
	UnhealthyEffect resourceapi.DeviceTaintEffect
}

// Driver is the driver name: DriverName, or DefaultDriverName when empty.
func (c Config) Driver() string {
	if c.DriverName == "" {
		return DefaultDriverName
	}
	return c.DriverName
}

// DeviceName is an EFA's device name: derived from its PCI address, so it is
// stable across reboots, and a DNS label ("efa-0000-4f-00-0").
func DeviceName(a pcie.Address) string {
	return "efa-" + strings.NewReplacer(":", "-", ".", "-").Replace(a.String())
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func num(n int64) resourceapi.DeviceAttribute  { return resourceapi.DeviceAttribute{IntValue: &n} }
func flag(b bool) resourceapi.DeviceAttribute  { return resourceapi.DeviceAttribute{BoolValue: &b} }

// EFADevice is the published device of one EFA of the topology. Its vendor
// name is the built-in one (an EFA is Amazon's, 1d0f): what a node publishes
// never depends on the pci.ids it happens to have.
func EFADevice(t *topology.Topology, d *topology.Device, cfg Config) (resourceapi.Device, error) {
	dev, _, err := EFADeviceMetadata(t, d, cfg)
	return dev, err
}

// EFADeviceMetadata is EFADevice and EFAMetadata of one EFA, its
// attributes computed once: what the plugin's inventory keeps.
func EFADeviceMetadata(t *topology.Topology, d *topology.Device, cfg Config) (resourceapi.Device, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	attrs, err := EFAMetadata(t, d, cfg)
	if err != nil {
		return resourceapi.Device{}, nil, err
	}
	dev := resourceapi.Device{Name: DeviceName(d.PCI.Address), Attributes: published(attrs)}
	return dev, attrs, CheckDevice(dev)
}

// EFAMetadata is every attribute of one EFA: the published ones and the
// MetadataOnly ones, as the device metadata a container reads gives them.
func EFAMetadata(t *topology.Topology, d *topology.Device, cfg Config) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	if d.Kind != topology.KindEFA || d.EFA == nil || d.PCI == nil {
		return nil, fmt.Errorf("%s is not an EFA", d.Name)
	}
	std, _ := t.StandardAttributes(d)
	p := d.PCI
	vendor := pciids.BuiltinVendor(p.Vendor)
	if vendor == "" {
		vendor = fmt.Sprintf("%04x", p.Vendor)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrPCIeRoot:  str(std.PCIeRoot),
		AttrPCIBusID:  str(std.PCIBusID),
		AttrPCIAddr:   str(std.PCIBusID),
		AttrPCIVendor: str(vendor),
		// The string AWS's DeviceClass selects on, whatever the local
		// pci.ids calls the function.
		AttrPCIDevice: str(pciids.EFA),
		AttrPCISubsys: str(fmt.Sprintf("%04x", p.SubsystemDevice)),
		AttrRDMA:      flag(true),
		AttrRDMADev:   str(d.Name),
		AttrKind:      str(KindEFA),
		AttrGen:       str(d.EFA.Generation.String()),
	}
	if std.NUMANode != nil {
		attrs[AttrNUMALocal] = num(int64(*std.NUMANode))
		if cfg.NUMAList {
			vals := make([]int64, len(std.NUMANodes))
			for i, n := range std.NUMANodes {
				vals[i] = int64(n)
			}
			attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValues: vals}
		} else {
			attrs[AttrNUMANode] = num(int64(*std.NUMANode))
		}
	}
	if g := d.Groups; g != nil {
		attrs[AttrGroup1] = str(g.Group1)
		attrs[AttrGroup4] = str(g.Group4)
		attrs[AttrGroup8] = str(g.Group8)
		attrs[AttrGroup16] = str(g.Group16)
	}
	if len(d.EFA.Ports) > 0 {
		attrs[AttrRate] = num(int64(d.EFA.Ports[0].RateGbps))
	}
	if d.EFA.Verbs != nil {
		attrs[AttrUverbs] = str(d.EFA.Verbs.Name)
	}
	if d.EFA.Netdev != "" {
		attrs[AttrNetdev] = str(d.EFA.Netdev)
	}
	var acc []string
	kinds := map[string]bool{}
	for _, a := range t.Closest(d) {
		if a.PCI != nil {
			acc = append(acc, a.PCI.Address.String())
			kinds[a.Kind.String()] = true
		}
	}
	// A list of addresses past 64 characters (more than four) says less
	// than pcieRoot already does; it is left out rather than cut.
	if s := strings.Join(acc, ","); s != "" && len(s) <= MaxStringLength {
		attrs[AttrAccel] = str(s)
	}
	if len(kinds) == 1 {
		for k := range kinds {
			attrs[AttrAccelKind] = str(k)
		}
	}
	return attrs, nil
}

// CheckDevice checks a device against the API's limits: a DNS-label name,
// valid attribute names, at most 32 attributes and capacities, strings of
// at most 64 characters.
func CheckDevice(d resourceapi.Device) error {
	var errs []string
	if msgs := validation.IsDNS1123Label(d.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("name %q: %s", d.Name, strings.Join(msgs, "; ")))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > MaxAttributesAndCapacities {
		errs = append(errs, fmt.Sprintf("%d attributes and capacities, at most %d", n, MaxAttributesAndCapacities))
	}
	for name, a := range d.Attributes {
		domain, id, qualified := strings.Cut(string(name), "/")
		if !qualified {
			id, domain = domain, ""
		}
		if domain != "" {
			if msgs := validation.IsDNS1123Subdomain(domain); len(msgs) > 0 {
				errs = append(errs, fmt.Sprintf("attribute %s: domain: %s", name, strings.Join(msgs, "; ")))
			}
		}
		if msgs := validation.IsCIdentifier(id); len(msgs) > 0 || len(id) > 32 {
			errs = append(errs, fmt.Sprintf("attribute %s: not a C identifier of at most 32 characters", name))
		}
		set := 0
		for _, ok := range []bool{a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil, a.VersionValue != nil, a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.VersionValues != nil} {
			if ok {
				set++
			}
		}
		if set != 1 {
			errs = append(errs, fmt.Sprintf("attribute %s: %d values set, want one", name, set))
		}
		if a.StringValue != nil && len(*a.StringValue) > MaxStringLength {
			errs = append(errs, fmt.Sprintf("attribute %s: %d characters, at most %d", name, len(*a.StringValue), MaxStringLength))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("device %s: %s", d.Name, strings.Join(errs, "; "))
	}
	return nil
}

// Pool is a node's pool of devices: its slices in order. The plugin hands
// it to the kubelet plugin helper (as resourceslice.DriverResources);
// Slices turns it into ResourceSlice objects.
type Pool struct {
	Name string // the node's name
	// Generation is the pool's generation; 0 is printed as 1, as the
	// helper's controller starts.
	Generation int64
	Slices     []Slice
}

// Slice is one ResourceSlice's content: devices, or (mixed group mode)
// the counter sets they consume.
type Slice struct {
	Devices        []resourceapi.Device
	SharedCounters []resourceapi.CounterSet
}

// Build makes the devices of the node's pool. By cfg.Groups: single EFAs
// (the default), one group device per PCIe root instead (exclusive), or
// both, made exclusive by shared counters in a counters-only slice (mixed).
// An EFA that cannot be published is named in the error; the others are
// in the pool.
func Build(t *topology.Topology, cfg Config) (Pool, error) {
	if err := cfg.CheckSharing(); err != nil {
		return Pool{}, err
	}
	var singles []resourceapi.Device
	var members []*topology.Device
	var errs []string
	for _, d := range t.Of(topology.KindEFA) {
		if d.EFA.Verbs == nil {
			// Nothing to give a container: not published until the
			// uverbs device appears (ib_uverbs loaded).
			errs = append(errs, fmt.Sprintf("efa %s: no uverbs device: not published", d.Name))
			continue
		}
		dev, err := EFADevice(t, d, cfg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if cfg.Sharing == SharingCapacity {
			shareable(&dev, cfg.shares())
		}
		singles = append(singles, dev)
		members = append(members, d)
	}
	var devs []resourceapi.Device
	var counters []resourceapi.CounterSet
	switch cfg.Groups {
	case GroupsNone:
		devs = singles
	case GroupsExclusive, GroupsMixed:
		groups := Groups(t, members)
		if cfg.Groups == GroupsMixed {
			devs = singles
			for i := range devs {
				devs[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
					CounterSet: CounterSetName(groups.rootOf[devs[i].Name]),
					Counters:   map[string]resourceapi.Counter{devs[i].Name: oneCounter()},
				}}
			}
		}
		for _, g := range groups.List {
			dev, err := GroupDevice(t, g, cfg)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if cfg.Groups == GroupsMixed {
				set := resourceapi.CounterSet{Name: CounterSetName(g.Root), Counters: map[string]resourceapi.Counter{}}
				use := map[string]resourceapi.Counter{}
				for _, m := range g.Members {
					set.Counters[DeviceName(m.PCI.Address)] = oneCounter()
					use[DeviceName(m.PCI.Address)] = oneCounter()
				}
				counters = append(counters, set)
				dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: use}}
			}
			devs = append(devs, dev)
		}
	default:
		return Pool{}, fmt.Errorf("unknown group mode %q (none, exclusive, mixed)", cfg.Groups)
	}
	pool := Pool{Name: cfg.NodeName}
	for len(counters) > 0 {
		n := min(len(counters), resourceapi.ResourceSliceMaxCounterSets)
		pool.Slices = append(pool.Slices, Slice{SharedCounters: counters[:n]})
		counters = counters[n:]
	}
	per := MaxDevicesPerSlice
	if cfg.Groups == GroupsMixed {
		per = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	for len(devs) > 0 {
		n := min(len(devs), per)
		pool.Slices = append(pool.Slices, Slice{Devices: devs[:n]})
		devs = devs[n:]
	}
	if len(pool.Slices) == 0 {
		// An empty pool says the driver runs and the node has no EFA.
		pool.Slices = []Slice{{Devices: []resourceapi.Device{}}}
	}
	if len(errs) > 0 {
		return pool, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return pool, nil
}

func oneCounter() resourceapi.Counter { return resourceapi.Counter{Value: resource.MustParse("1")} }

// Slices turns a pool into the ResourceSlice objects the kubelet plugin's
// controller creates for a node: generation 1 (or the pool's), names
// generated from the slice index, driver and node.
func Slices(pool Pool, cfg Config) []*resourceapi.ResourceSlice {
	gen := pool.Generation
	if gen == 0 {
		gen = 1
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		node := cfg.NodeName
		out = append(out, &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{GenerateName: fmt.Sprintf("%x-%s-%s-", i, cfg.Driver(), node)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         cfg.Driver(),
				NodeName:       &node,
				Pool:           resourceapi.ResourcePool{Name: pool.Name, Generation: gen, ResourceSliceCount: int64(len(pool.Slices))},
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		})
	}
	return out
}

// ClassOptions say how the DeviceClasses the project ships are named.
type ClassOptions struct {
	DriverName string // DefaultDriverName when empty
	ClassName  string // the single-EFA class; DefaultDeviceClass when empty
	// ExtendedResourceName, when set, is the single-EFA class's
	// extendedResourceName: a pod that asks for this extended resource
	// (vpc.amazonaws.com/efa, AWS's device plugin's) in its containers'
	// resources gets that many EFAs through a claim the scheduler makes
	// (DRAExtendedResource: beta and on by default in Kubernetes 1.36, GA
	// in 1.37; API servers without it drop the field).
	ExtendedResourceName string
}

// DeviceClasses are the classes the project ships: efa.networking.k8s.aws
// (or o.ClassName) selects exactly the single EFAs of the driver, with the
// very expression AWS's class uses; efa-group.networking.k8s.aws selects
// the group devices. Every device efakit publishes has both attributes
// the two classes read, so neither class fails on the other's devices.
func DeviceClasses(o ClassOptions) []*resourceapi.DeviceClass {
	driverName, className := o.DriverName, o.ClassName
	if driverName == "" {
		driverName = DefaultDriverName
	}
	if className == "" {
		className = DefaultDeviceClass
	}
	class := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
		}
	}
	single := class(className, fmt.Sprintf(`device.driver == %q && device.attributes[%q].pciDevice == %q`, driverName, driverName, pciids.EFA))
	if o.ExtendedResourceName != "" {
		name := o.ExtendedResourceName
		single.Spec.ExtendedResourceName = &name
	}
	return []*resourceapi.DeviceClass{
		single,
		class(DefaultGroupDeviceClass, fmt.Sprintf(`device.driver == %q && device.attributes[%q].kind == %q`, driverName, driverName, KindGroup)),
	}
}
