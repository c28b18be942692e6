package resources

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/topology"
)

// GroupMode says whether a node publishes EFA group devices.
type GroupMode string

// The group modes.
const (
	// GroupsNone publishes single EFAs only: claims ask for "count: N"
	// EFAs with the accelerator's pcieRoot (see `efakit claims`).
	GroupsNone GroupMode = ""
	// GroupsExclusive publishes one device per PCIe root holding EFAs
	// (all of them) instead of single EFAs: no counters, no scheduling cost,
	// no double allocation. For node groups that run whole-GPU jobs.
	GroupsExclusive GroupMode = "exclusive"
	// GroupsMixed publishes single EFAs and groups side by side, made
	// exclusive by shared counters (one per member) in a counters-only
	// slice. Needs the API server's DRAPartitionableDevices, and costs the
	// scheduler time for every claim in the cluster (docs/performance.md).
	GroupsMixed GroupMode = "mixed"
)

// ParseGroupMode parses the --groups flag: none, exclusive or mixed.
func ParseGroupMode(s string) (GroupMode, error) {
	switch s {
	case "", "none":
		return GroupsNone, nil
	case "exclusive":
		return GroupsExclusive, nil
	case "mixed":
		return GroupsMixed, nil
	}
	return "", fmt.Errorf("unknown group mode %q (none, exclusive, mixed)", s)
}

// NodeGroupMode is a node's group mode: the value of its label key when
// the node has that label (none, exclusive or mixed; empty is none), def
// when it has not or key is "". An unknown value is an error naming the
// label: a typo never publishes in a mode nobody chose.
func NodeGroupMode(labels map[string]string, key string, def GroupMode) (GroupMode, error) {
	v, ok := labels[key]
	if key == "" || !ok {
		return def, nil
	}
	m, err := ParseGroupMode(v)
	if err != nil {
		return "", fmt.Errorf("node label %s: %w", key, err)
	}
	return m, nil
}

// Group device values.
const (
	KindGroup = "efa-group"
	// GroupPCIDevice is a group's pciDevice: not AWS's EFA string, so that
	// single-EFA classes (AWS's included) never select a group.
	GroupPCIDevice = "EFA group"
	// DefaultGroupDeviceClass selects the groups.
	DefaultGroupDeviceClass = "efa-group.networking.k8s.aws"
	AttrMembers             = resourceapi.QualifiedName("members")
	AttrMemberCount         = resourceapi.QualifiedName("memberCount")
)

// Group is all EFAs of one PCIe root.
type Group struct {
	Root    string
	Members []*topology.Device // in PCI order
}

// MemberNames are the published device names of the group's members.
func (g Group) MemberNames() []string {
	out := make([]string, len(g.Members))
	for i, m := range g.Members {
		out[i] = DeviceName(m.PCI.Address)
	}
	return out
}

// GroupSet is the groups of a node.
type GroupSet struct {
	List   []Group
	rootOf map[string]string // single device name -> root
}

// Groups gathers the given EFAs by PCIe root, in root order. A root with
// EFAs and no accelerator still forms a group.
func Groups(t *topology.Topology, efas []*topology.Device) GroupSet {
	gs := GroupSet{rootOf: map[string]string{}}
	byRoot := map[string]*Group{}
	var roots []string
	for _, d := range efas {
		r := d.PCI.Root
		if byRoot[r] == nil {
			byRoot[r] = &Group{Root: r}
			roots = append(roots, r)
		}
		byRoot[r].Members = append(byRoot[r].Members, d)
		gs.rootOf[DeviceName(d.PCI.Address)] = r
	}
	slices.Sort(roots)
	for _, r := range roots {
		gs.List = append(gs.List, *byRoot[r])
	}
	return gs
}

// GroupDeviceName is a group's device name, from its root: "efa-group-pci0000-44".
func GroupDeviceName(root string) string { return "efa-group-" + strings.ReplaceAll(root, ":", "-") }

// CounterSetName is the counter set of a root's EFAs in mixed mode.
func CounterSetName(root string) string { return "efas-" + strings.ReplaceAll(root, ":", "-") }

// GroupDevice is the published device of a group: the root's standard
// attributes (numaNode and device groups only where every member agrees)
// and every attribute the shipped classes read, with values that keep
// single-EFA classes from selecting it.
func GroupDevice(t *topology.Topology, g Group, cfg Config) (resourceapi.Device, error) {
	dev, _, err := GroupDeviceMetadata(t, g, cfg)
	return dev, err
}

// GroupDeviceMetadata is GroupDevice and GroupMetadata of one group, its
// attributes computed once.
func GroupDeviceMetadata(t *topology.Topology, g Group, cfg Config) (resourceapi.Device, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	attrs := GroupMetadata(t, g, cfg)
	dev := resourceapi.Device{Name: GroupDeviceName(g.Root), Attributes: published(attrs)}
	return dev, attrs, CheckDevice(dev)
}

// GroupMetadata is every attribute of a group: the published ones and the
// MetadataOnly ones (the member count and names among them).
func GroupMetadata(t *topology.Topology, g Group, cfg Config) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	var names []string
	numa := g.Members[0].NUMANode()
	kinds := map[string]bool{}
	var acc []string
	for _, m := range g.Members {
		names = append(names, m.Name)
		if m.NUMANode() != numa {
			numa = -1
		}
		for _, a := range t.Closest(m) {
			if a.PCI != nil && !slices.Contains(acc, a.PCI.Address.String()) {
				acc = append(acc, a.PCI.Address.String())
				kinds[a.Kind.String()] = true
			}
		}
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrPCIeRoot:    str(g.Root),
		AttrPCIDevice:   str(GroupPCIDevice),
		AttrKind:        str(KindGroup),
		AttrRDMA:        flag(true),
		AttrMemberCount: num(int64(len(g.Members))),
		AttrGen:         str(g.Members[0].EFA.Generation.String()),
	}
	if s := strings.Join(names, ","); len(s) <= MaxStringLength {
		attrs[AttrMembers] = str(s)
	}
	if len(g.Members[0].EFA.Ports) > 0 {
		attrs[AttrRate] = num(int64(g.Members[0].EFA.Ports[0].RateGbps))
	}
	if numa >= 0 {
		attrs[AttrNUMALocal] = num(int64(numa))
		if cfg.NUMAList {
			std, _ := t.StandardAttributes(g.Members[0])
			vals := make([]int64, len(std.NUMANodes))
			for i, n := range std.NUMANodes {
				vals[i] = int64(n)
			}
			attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValues: vals}
		} else {
			attrs[AttrNUMANode] = num(int64(numa))
		}
	}
	// A device group only where every member has the same value: a group
	// of two EFAs never shares devicegroup1_id (each EFA's own address),
	// and on trn2 a root's EFAs share devicegroup4_id.
	for name, get := range map[resourceapi.QualifiedName]func(*neuron.Groups) string{
		AttrGroup1: func(g *neuron.Groups) string { return g.Group1 }, AttrGroup4: func(g *neuron.Groups) string { return g.Group4 },
		AttrGroup8: func(g *neuron.Groups) string { return g.Group8 }, AttrGroup16: func(g *neuron.Groups) string { return g.Group16 },
	} {
		v := ""
		for i, m := range g.Members {
			if m.Groups == nil || (i > 0 && get(m.Groups) != v) {
				v = ""
				break
			}
			v = get(m.Groups)
		}
		if v != "" {
			attrs[name] = str(v)
		}
	}
	if s := strings.Join(acc, ","); s != "" && len(s) <= MaxStringLength {
		attrs[AttrAccel] = str(s)
	}
	if len(kinds) == 1 {
		for k := range kinds {
			attrs[AttrAccelKind] = str(k)
		}
	}
	return attrs
}
