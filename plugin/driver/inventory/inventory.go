// Package inventory is what the kubelet plugin's last scan of sysfs found:
// the devices it publishes, with what a prepare needs of each, the group
// devices, and health with its history, as one immutable Snapshot. The one
// goroutine that scans builds each Snapshot and replaces the last one
// whole (Holder); everyone else reads it without a lock and never waits
// for a scan, a prepare or a disk.
package inventory

import (
	"errors"
	"maps"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/topology"
)

// Device is what a prepare and the readers need of a published device.
type Device struct {
	// RDMAName and Uverbs name the EFA's RDMA device and uverbs device as
	// the scan found them; a prepare reads sysfs again for its numbers.
	RDMAName, Uverbs string
	// Major and Minor are the uverbs device's number.
	Major, Minor uint32
	PCIAddress   string
	// Attributes are the published ones: a prepare's device metadata.
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	// EFA is the scan's device, whose counters /metrics reads; nil for a
	// group device.
	EFA *efa.Device
}

// Snapshot is one scan's inventory. It is never changed once a Holder
// holds it: a new scan builds a new one, sharing nothing it changes.
type Snapshot struct {
	// Pool is what the scan publishes, health not applied.
	Pool *resources.Pool
	// Devices are the published devices by name, EFAs and groups.
	Devices map[string]Device
	// Groups are each group device's members by name.
	Groups map[string][]string
	// HealthMembers are each group's members for its health: the scan's,
	// and those that left it unhealthy (gone from sysfs, no uverbs
	// device), so that a group never turns healthy by shrinking.
	HealthMembers map[string][]string
	// Health is every device's health by name, an EFA gone since an
	// earlier scan included (unhealthy until it returns).
	Health map[string]resources.Health
	// ScanErr is what the scan could not read, "" when nothing.
	ScanErr string
	// StandAside is why the plugin publishes and prepares nothing (the
	// owner check's verdict), "" normally.
	StandAside string
	// GPUDirect are the GPU-EFA pairs the scan judged (gpudirect.Assess,
	// without ACS), by the EFA's PCI address; nil without GPUs.
	GPUDirect map[string][]gpudirect.Pair
}

// Empty is the inventory before the first scan: no device.
func Empty() *Snapshot {
	return &Snapshot{Devices: map[string]Device{}, Groups: map[string][]string{},
		HealthMembers: map[string][]string{}, Health: map[string]resources.Health{}}
}

// Change is a device whose health changed from one snapshot to the next:
// another grade, or the same one for another reason.
type Change struct {
	Device, RDMAName string
	Was, Now         resources.Health
}

// Build makes the snapshot of a scan's topology, published as cfg says,
// graded by the scan's verdicts (resources.Grade's), with the health
// history of prev (the last snapshot; Empty before the first scan), and
// lists the health changes since prev. The errors are
// the scan's and the build's, as a publish names them; the snapshot holds
// what could be read.
func Build(topo *topology.Topology, scanErr error, cfg resources.Config, prev *Snapshot, verdicts map[string]health.Verdict) (*Snapshot, []Change, error) {
	pool, buildErr := resources.Build(topo, cfg)
	s := &Snapshot{Pool: &pool, Devices: map[string]Device{}, Groups: map[string][]string{}, StandAside: prev.StandAside}
	var members []*topology.Device
	for _, d := range topo.Of(topology.KindEFA) {
		if d.EFA.Verbs == nil {
			continue
		}
		// Only what is published (the API's limits checked); its
		// metadata is more (resources.MetadataOnly).
		_, attrs, err := resources.EFADeviceMetadata(topo, d, cfg)
		if err != nil {
			continue
		}
		members = append(members, d)
		s.Devices[resources.DeviceName(d.PCI.Address)] = Device{RDMAName: d.Name, Uverbs: d.EFA.Verbs.Name,
			Major: d.EFA.Verbs.Major, Minor: d.EFA.Verbs.Minor,
			PCIAddress: d.PCI.Address.String(), Attributes: attrs, EFA: d.EFA}
	}
	if cfg.Groups != resources.GroupsNone {
		for _, g := range resources.Groups(topo, members).List {
			name := resources.GroupDeviceName(g.Root)
			s.Groups[name] = g.MemberNames()
			if _, attrs, err := resources.GroupDeviceMetadata(topo, g, cfg); err == nil {
				s.Devices[name] = Device{Attributes: attrs}
			}
		}
	}
	s.health(resources.NodeHealth(topo, nil, verdicts), prev)
	err := errors.Join(scanErr, buildErr)
	if err != nil {
		s.ScanErr = err.Error()
	}
	return s, changes(prev, s), err
}

// health sets the snapshot's health from the EFAs' (by name) and the
// history of prev: an EFA that was there and is gone is unhealthy until it
// returns, and a group is as healthy as its least healthy member, counting
// the members that left it unhealthy (gone, lost their uverbs device).
func (s *Snapshot) health(efas map[string]resources.Health, prev *Snapshot) {
	for name := range prev.Health {
		if _, ok := efas[name]; !ok && prev.HealthMembers[name] == nil {
			efas[name] = resources.Health{Grade: health.Unhealthy, Message: "device gone from sysfs", Reason: "gone"}
		}
	}
	s.HealthMembers = make(map[string][]string, len(s.Groups))
	for name, ms := range s.Groups {
		s.HealthMembers[name] = slices.Clone(ms)
	}
	for name, old := range prev.HealthMembers {
		for _, m := range old {
			if efas[m].Unhealthy() && !slices.Contains(s.HealthMembers[name], m) {
				s.HealthMembers[name] = append(s.HealthMembers[name], m)
			}
		}
	}
	s.Health = maps.Clone(efas)
	for name, ms := range s.HealthMembers {
		slices.Sort(ms)
		s.Health[name] = resources.GroupHealth(ms, efas)
	}
}

// changes compares the health of next with prev's: a change is another
// grade or reason (a degraded device's message counts its counters, which
// move at every scan). A device not healthy at the first scan is a
// change; one healthy then is not.
func changes(prev, next *Snapshot) []Change {
	var out []Change
	for name, h := range next.Health {
		was, known := prev.Health[name]
		if was.Grade == h.Grade && was.Reason == h.Reason {
			continue
		}
		if h.Grade == health.Healthy && !known {
			continue
		}
		rdma := next.Devices[name].RDMAName
		if rdma == "" {
			rdma = prev.Devices[name].RDMAName
		}
		out = append(out, Change{Device: name, RDMAName: rdma, Was: was, Now: h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// IsGroup tells a group device's name from an EFA's.
func (s *Snapshot) IsGroup(name string) bool {
	_, ok := s.HealthMembers[name]
	return ok
}

// WithStandAside is the snapshot with another owner verdict: a copy that
// shares the rest, which no one changes.
func (s *Snapshot) WithStandAside(why string) *Snapshot {
	n := *s
	n.StandAside = why
	return &n
}

// Published is what to publish of the snapshot: its pool with health
// applied (resources.ApplyHealth: devices that are not healthy tainted,
// as far as the API server keeps taints), or no pool at all while the
// plugin stands aside; nil before the first scan. It returns the counts
// of unhealthy and degraded devices too.
func (s *Snapshot) Published(cfg resources.Config, support resources.TaintSupport) (*resourceslice.DriverResources, resources.Counts) {
	switch {
	case s.StandAside != "":
		return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}, resources.Counts{}
	case s.Pool == nil:
		return nil, resources.Counts{}
	}
	pool, n := resources.ApplyHealth(*s.Pool, s.Health, cfg, support)
	return DriverResources(pool), n
}

// DriverResources is a pool in the form the kubelet plugin helper and the
// ResourceSlice controller take.
func DriverResources(p resources.Pool) *resourceslice.DriverResources {
	pool := resourceslice.Pool{Generation: p.Generation, Slices: make([]resourceslice.Slice, len(p.Slices))}
	for i, s := range p.Slices {
		pool.Slices[i] = resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{p.Name: pool}}
}
