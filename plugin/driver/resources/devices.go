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
	// GroupsNodeLabel, when set, is a node label whose value (none,
	// exclusive or mixed) is the node's group mode in place of Groups
	// (NodeGroupMode): one DaemonSet serves node groups of each mode.
	GroupsNodeLabel string
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
