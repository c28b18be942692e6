package resources

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/topology"
)

// Health is a published device's health, from sysfs.
type Health struct {
	Unhealthy bool
	Message   string // why it is unhealthy; "" when healthy
	Reason    string // a label value: the taint's value
}

// ReasonMember is the taint value of a group with an unhealthy member.
const ReasonMember = "member-unhealthy"

// EFAHealth is an EFA's health from sysfs: unhealthy when it is not bound
// to efa, has no uverbs device, or its port is not ACTIVE.
func EFAHealth(d *topology.Device) Health {
	switch {
	case d.PCI.Driver != "efa":
		return Health{true, fmt.Sprintf("driver %q, not efa", d.PCI.Driver), "not-bound-to-efa"}
	case d.EFA.Verbs == nil:
		return Health{true, "no uverbs device", "no-uverbs-device"}
	case len(d.EFA.Ports) == 0:
		return Health{true, "no port", "no-port"}
	case d.EFA.Ports[0].State != "ACTIVE":
		return Health{true, "port " + d.EFA.Ports[0].State, "port-not-active"}
	}
	return Health{}
}

// NodeHealth is the health of every EFA of t, and of each group (its
// members' device names by group device name): as healthy as its least
// healthy member, which it names.
func NodeHealth(t *topology.Topology, groups map[string][]string) map[string]Health {
	health := map[string]Health{}
	for _, d := range t.Of(topology.KindEFA) {
		health[DeviceName(d.PCI.Address)] = EFAHealth(d)
	}
	for name, members := range groups {
		health[name] = GroupHealth(members, health)
	}
	return health
}

// GroupHealth is a group's health from its members' (by device name): as
// healthy as the first unhealthy member, which it names. A member missing
// from health is gone, so unhealthy: a group never turns healthy by
// losing a member.
func GroupHealth(members []string, health map[string]Health) Health {
	for _, m := range members {
		mh, ok := health[m]
		if !ok {
			mh = Health{true, "device gone from sysfs", "gone"}
		}
		if mh.Unhealthy {
			return Health{true, fmt.Sprintf("member %s: %s", m, mh.Message), ReasonMember}
		}
	}
	return Health{}
}

// GroupMembers are the published device names of the members of each
// group device of t (none without groups), for NodeHealth.
func GroupMembers(t *topology.Topology, cfg Config) map[string][]string {
	groups := map[string][]string{}
	if cfg.Groups == GroupsNone {
		return groups
	}
	var members []*topology.Device
	for _, d := range t.Of(topology.KindEFA) {
		if d.EFA.Verbs != nil {
			members = append(members, d)
		}
	}
	for _, g := range Groups(t, members).List {
		groups[GroupDeviceName(g.Root)] = g.MemberNames()
	}
	return groups
}

// TaintKey is the key of the NoSchedule taint an unhealthy device carries,
// in the driver's domain: "<driver>/unhealthy", its value the reason.
func (c Config) TaintKey() string { return c.Driver() + "/unhealthy" }

// ApplyHealth keeps unhealthy devices out of new allocations without
// touching allocated claims: a NoSchedule taint on each unhealthy device
// (a group with an unhealthy member included), or, with withhold (the API
// server drops taints: no DRADeviceTaints, before Kubernetes 1.36 by
// default), the device left out of its slice. It returns a copy and the
// count; pool is not changed.
func ApplyHealth(pool Pool, health map[string]Health, cfg Config, withhold bool) (Pool, int) {
	out := Pool{Name: pool.Name, Generation: pool.Generation, Slices: make([]Slice, len(pool.Slices))}
	n := 0
	for i, s := range pool.Slices {
		var devs []resourceapi.Device // nil stays nil, as in a counters-only slice
		if s.Devices != nil {
			devs = make([]resourceapi.Device, 0, len(s.Devices))
		}
		for _, d := range s.Devices {
			d = *d.DeepCopy()
			if h, ok := health[d.Name]; ok && h.Unhealthy {
				n++
				if withhold {
					continue
				}
				d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: cfg.TaintKey(), Value: h.Reason, Effect: resourceapi.DeviceTaintEffectNoSchedule})
			}
			devs = append(devs, d)
		}
		out.Slices[i] = Slice{Devices: devs, SharedCounters: deepCopyCounters(s.SharedCounters)}
	}
	return out, n
}

func deepCopyCounters(in []resourceapi.CounterSet) []resourceapi.CounterSet {
	if in == nil {
		return nil
	}
	out := make([]resourceapi.CounterSet, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// Published are the devices as the plugin publishes them for the
// topology: Build, with each unhealthy EFA and group tainted. `efakit
// slices` prints them; the plugin applies its own running health to Build's
// pool the same way (ApplyHealth).
func Published(t *topology.Topology, cfg Config) (Pool, error) {
	pool, err := Build(t, cfg)
	out, _ := ApplyHealth(pool, NodeHealth(t, GroupMembers(t, cfg)), cfg, false)
	return out, err
}
