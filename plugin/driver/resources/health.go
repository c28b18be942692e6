package resources

import (
	"fmt"
	"maps"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/topology"
)

// Health is a published device's health: its grade, why, and the reason
// as a label value (its taint's value).
type Health struct {
	Grade   health.Grade
	Message string // why it is not healthy; "" when healthy
	Reason  string // a label value: the taint's value
}

// Said is the message with the grade where the grade is not plain from
// it: "degraded: " before a degraded device's; an unhealthy or healthy
// device's as it is. The kubelet's report (which knows only Healthy and
// Unhealthy) and the claim's Healthy condition carry it.
func (h Health) Said() string {
	if h.Grade == health.Degraded {
		return "degraded: " + h.Message
	}
	return h.Message
}

// Unhealthy tells whether the device is kept out of new allocations.
func (h Health) Unhealthy() bool { return h.Grade == health.Unhealthy }

// ReasonMember is the taint value of a group with an unhealthy member.
const ReasonMember = "member-unhealthy"

// ReasonMemberDegraded is the taint value of a group with a degraded
// member and no unhealthy one.
const ReasonMemberDegraded = "member-degraded"

func unhealthy(msg, reason string) Health { return Health{health.Unhealthy, msg, reason} }

// EFAHealth is an EFA's health from sysfs at one moment: unhealthy when it
// is not bound to efa, has no uverbs device, or its port is not ACTIVE.
func EFAHealth(d *topology.Device) Health {
	switch {
	case d.PCI.Driver != "efa":
		return unhealthy(fmt.Sprintf("driver %q, not efa", d.PCI.Driver), "not-bound-to-efa")
	case d.EFA.Verbs == nil:
		return unhealthy("no uverbs device", "no-uverbs-device")
	case len(d.EFA.Ports) == 0:
		return unhealthy("no port", "no-port")
	case d.EFA.Ports[0].State != "ACTIVE":
		return unhealthy("port "+d.EFA.Ports[0].State, "port-not-active")
	}
	return Health{}
}

// Grade adds a sample of every EFA of t to tr and returns each one's
// verdict by device name: its port's state and rate as t has them, and,
// with counters, the counters that function reads (nil: none, only what
// needs no history is graded). Devices tr knew that t lacks are
// forgotten.
func Grade(t *topology.Topology, tr *health.Tracker, counters func(*efa.Device) map[string]uint64, now time.Time) map[string]health.Verdict {
	efas := t.Of(topology.KindEFA)
	var nodeRate float64
	for _, d := range efas {
		if len(d.EFA.Ports) > 0 {
			nodeRate = max(nodeRate, d.EFA.Ports[0].RateGbps)
		}
	}
	out := make(map[string]health.Verdict, len(efas))
	seen := make(map[string]bool, len(efas))
	for _, d := range efas {
		name := DeviceName(d.PCI.Address)
		seen[name] = true
		s := health.Sample{At: now}
		if len(d.EFA.Ports) > 0 {
			s.State, s.RateGbps = d.EFA.Ports[0].State, d.EFA.Ports[0].RateGbps
		}
		if counters != nil {
			s.Counters = counters(d.EFA)
		}
		out[name] = tr.Observe(name, s, nodeRate)
	}
	tr.Retain(seen)
	return out
}

// CountersOf is Grade's view of counters read by PCI address (as the
// plugin's EFA exporter reads them): an EFA's device counters and its
// first port's as one map; nil for an EFA not read.
func CountersOf(read map[string]*efa.Counters) func(*efa.Device) map[string]uint64 {
	return func(d *efa.Device) map[string]uint64 {
		c := read[d.PCI.Address.String()]
		if c == nil {
			return nil
		}
		out := make(map[string]uint64, len(c.Device)+32)
		maps.Copy(out, c.Device)
		if len(d.Ports) > 0 {
			maps.Copy(out, c.Ports[d.Ports[0].Number])
		}
		return out
	}
}

// NodeHealth is the health of every EFA of t, and of each group (its
// members' device names by group device name): as healthy as its least
// healthy member, which it names. An EFA that sysfs shows unusable now
// (EFAHealth) is Unhealthy whatever its verdict; otherwise its verdict
// (Grade's; none: Healthy) grades it.
func NodeHealth(t *topology.Topology, groups map[string][]string, verdicts map[string]health.Verdict) map[string]Health {
	out := map[string]Health{}
	for _, d := range t.Of(topology.KindEFA) {
		name := DeviceName(d.PCI.Address)
		h := EFAHealth(d)
		if v, ok := verdicts[name]; ok && h.Grade == health.Healthy {
			h = Health{v.Grade, v.Message, v.Reason}
		}
		out[name] = h
	}
	for name, members := range groups {
		out[name] = GroupHealth(members, out)
	}
	return out
}

// GroupHealth is a group's health from its members' (by device name): as
// healthy as its least healthy member, which it names. A member missing
// from health is gone, so unhealthy: a group never turns healthy by
// losing a member.
func GroupHealth(members []string, health map[string]Health) Health {
	var worst Health
	for _, m := range members {
		mh, ok := health[m]
		if !ok {
			mh = unhealthy("device gone from sysfs", "gone")
		}
		if mh.Grade > worst.Grade {
			reason := ReasonMember
			if !mh.Unhealthy() {
				reason = ReasonMemberDegraded
			}
			worst = Health{mh.Grade, fmt.Sprintf("member %s: %s", m, mh.Message), reason}
		}
	}
	return worst
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

// TaintKey is the key of the taint an unhealthy device carries, in the
// driver's domain: "<driver>/unhealthy", its value the reason.
func (c Config) TaintKey() string { return c.Driver() + "/unhealthy" }

// DegradedTaintKey is the key of the taint (effect None) a degraded
// device carries: "<driver>/degraded", its value the reason.
func (c Config) DegradedTaintKey() string { return c.Driver() + "/degraded" }

// unhealthyEffect is the effect of an unhealthy device's taint.
func (c Config) unhealthyEffect() resourceapi.DeviceTaintEffect {
	if c.UnhealthyEffect == "" {
		return resourceapi.DeviceTaintEffectNoSchedule
	}
	return c.UnhealthyEffect
}

// TaintSupport is what the API server keeps of the health taints.
type TaintSupport struct {
	// NoTaints: it drops device taints (no DRADeviceTaints, before
	// Kubernetes 1.36 by default). Unhealthy devices are left out of
	// their slices instead, degraded ones published unmarked.
	NoTaints bool
	// NoNoneEffect: it refuses the effect None (older API servers):
	// degraded devices are published unmarked.
	NoNoneEffect bool
}

// ApplyHealth marks each device that is not healthy without touching
// allocated claims: an unhealthy one (a group with an unhealthy member
// included) gets a taint of cfg's UnhealthyEffect, NoSchedule by default,
// keyed TaintKey, or, where the API server drops taints, is left out of
// its slice; a degraded one gets a taint of effect None keyed
// DegradedTaintKey, which no allocation heeds, where the API server keeps
// it. It returns a copy and the counts of unhealthy and degraded devices;
// pool is not changed.
func ApplyHealth(pool Pool, health map[string]Health, cfg Config, support TaintSupport) (Pool, Counts) {
	out := Pool{Name: pool.Name, Generation: pool.Generation, Slices: make([]Slice, len(pool.Slices))}
	var n Counts
	for i, s := range pool.Slices {
		var devs []resourceapi.Device // nil stays nil, as in a counters-only slice
		if s.Devices != nil {
			devs = make([]resourceapi.Device, 0, len(s.Devices))
		}
		for _, d := range s.Devices {
			d = *d.DeepCopy()
			h := health[d.Name]
			switch {
			case h.Unhealthy():
				n.Unhealthy++
				if support.NoTaints {
					continue
				}
				d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: cfg.TaintKey(), Value: h.Reason, Effect: cfg.unhealthyEffect()})
			case h.Grade != 0:
				n.Degraded++
				if !support.NoTaints && !support.NoNoneEffect {
					d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: cfg.DegradedTaintKey(), Value: h.Reason, Effect: resourceapi.DeviceTaintEffectNone})
				}
			}
			devs = append(devs, d)
		}
		out.Slices[i] = Slice{Devices: devs, SharedCounters: deepCopyCounters(s.SharedCounters)}
	}
	return out, n
}

// Counts are how many published devices are unhealthy and degraded.
type Counts struct{ Unhealthy, Degraded int }

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

// Published are the devices as the plugin publishes them at its first
// scan of the topology: Build, with each EFA and group graded and marked
// (ApplyHealth). With no history, only what one look shows grades them: a
// device unusable now, a link below the node's rate. `efakit slices`
// prints them; the plugin applies its running health to Build's pool the
// same way.
func Published(t *topology.Topology, cfg Config) (Pool, error) {
	pool, err := Build(t, cfg)
	verdicts := Grade(t, health.NewTracker(health.DefaultPolicy()), nil, time.Now())
	out, _ := ApplyHealth(pool, NodeHealth(t, GroupMembers(t, cfg), verdicts), cfg, TaintSupport{})
	return out, err
}
