package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// The kinds of device efakit publishes, as its DeviceClasses select them.
type deviceKind int

const (
	kindOther  deviceKind = iota // a class that is not one of efakit's
	kindSingle                   // one EFA: efa.networking.k8s.aws
	kindGroup                    // every EFA of a PCIe root: efa-group.networking.k8s.aws
)

func (k deviceKind) String() string {
	switch k {
	case kindSingle:
		return "single EFA"
	case kindGroup:
		return "EFA group"
	}
	return "device of another class"
}

// classKind is what a DeviceClass selects among efakit's devices: its
// selectors compared with those of the classes efakit ships for driver
// (resources.DeviceClasses), whatever the class is named.
func classKind(dc *resourceapi.DeviceClass, driver string) deviceKind {
	ours := resources.DeviceClasses(resources.ClassOptions{DriverName: driver})
	for i, kind := range []deviceKind{kindSingle, kindGroup} {
		if selectorsEqual(dc.Spec.Selectors, ours[i].Spec.Selectors) {
			return kind
		}
	}
	return kindOther
}

func selectorsEqual(a, b []resourceapi.DeviceSelector) bool {
	return slices.EqualFunc(a, b, func(x, y resourceapi.DeviceSelector) bool {
		return x.CEL != nil && y.CEL != nil && strings.TrimSpace(x.CEL.Expression) == strings.TrimSpace(y.CEL.Expression)
	})
}

// deviceKindOf is the kind of a device efakit published, from its kind
// attribute.
func deviceKindOf(d resourceapi.Device) deviceKind {
	a, ok := d.Attributes[resources.AttrKind]
	switch {
	case !ok || a.StringValue == nil:
		return kindOther
	case *a.StringValue == resources.KindEFA:
		return kindSingle
	case *a.StringValue == resources.KindGroup:
		return kindGroup
	}
	return kindOther
}

// asked is one way to serve a request: the request itself, or one of its
// firstAvailable subrequests.
type asked struct {
	name      string // "efa", or "efa/group" for a subrequest
	class     string
	kind      deviceKind
	count     int64 // devices asked; 0 with all
	all       bool  // allocationMode All
	selectors bool  // the request adds selectors of its own
}

func (a asked) String() string {
	what := fmt.Sprintf("%d %s", a.count, a.kind)
	if a.count != 1 && a.kind != kindOther {
		what += "s"
	}
	if a.all {
		what = "every " + a.kind.String()
	}
	s := fmt.Sprintf("request %q: %s (class %s)", a.name, what, a.class)
	if a.selectors {
		s += ", with selectors of its own"
	}
	return s
}

// need is a claim's request: any one of its alternatives serves it.
type need struct{ alternatives []asked }

// podClaim is one claim of the pod, and where its spec comes from.
type podClaim struct {
	name      string // the pod's name for it
	source    string // "ResourceClaim ns/x", or the template when the claim is not made yet
	claimName string // the ResourceClaim's name; "" before it is made
	allocated string // the node it is allocated on; "" when not allocated
	needs     []need
}

// nodeDevices is what one node publishes through efakit, and how much of
// it claims hold.
type nodeDevices struct {
	published map[deviceKind]int
	allocated map[deviceKind]int
}

// mode is the group mode the node's devices show.
func (n nodeDevices) mode() string {
	singles, groups := n.published[kindSingle], n.published[kindGroup]
	switch {
	case singles > 0 && groups > 0:
		return "mixed mode (single EFAs and EFA groups)"
	case groups > 0:
		return "exclusive mode (EFA groups only)"
	case singles > 0:
		return "the default mode (single EFAs only)"
	}
	return modeNone
}

// modeNone is the mode of a node that publishes no efakit device.
const modeNone = "no EFA published (no efakit plugin, or no EFA)"

// Why a node cannot serve a request.
type cause int

const (
	causeNone         cause = iota
	causeNotPublished       // no device of the kind
	causeTooFew             // fewer devices than asked
	causeHeld               // enough devices, not enough free
)

// verdict is what a node says of one alternative: causeNone when it can
// serve it by kind and count, else why, in words.
func (n nodeDevices) verdict(a asked) (cause, string) {
	if a.kind == kindOther {
		return causeNone, ""
	}
	pub, free := n.published[a.kind], n.published[a.kind]-n.allocated[a.kind]
	switch {
	case pub == 0:
		return causeNotPublished, "publishes no " + a.kind.String()
	case a.all && free < pub:
		return causeHeld, fmt.Sprintf("has %d of its %d %ss free, every one asked", free, pub, a.kind)
	case a.all:
		return causeNone, ""
	case a.count > int64(pub):
		return causeTooFew, fmt.Sprintf("publishes %d %ss, %d asked", pub, a.kind, a.count)
	case a.count > int64(free):
		return causeHeld, fmt.Sprintf("has %d of its %d %ss free, the rest allocated to other claims", free, pub, a.kind)
	}
	return causeNone, ""
}

// explanation is the answer of efakit explain.
type explanation struct {
	lines  []string
	served bool // the pod is bound, or some node it may run on can serve its EFA requests
}

// explain says why a pod with efakit claims is pending: the nodes it may
// run on, grouped by the mode their devices show, and for each group what
// of the claims' EFA requests they cannot serve (the kind, the count, or
// the devices free). It checks kinds and counts only: the requests' own
// selectors, the claims' constraints and other drivers' devices are the
// scheduler's.
func explain(pod *corev1.Pod, claims []podClaim, nodes []corev1.Node, devices map[string]nodeDevices) explanation {
	var e explanation
	add := func(format string, args ...any) { e.lines = append(e.lines, fmt.Sprintf(format, args...)) }
	id := pod.Namespace + "/" + pod.Name
	if pod.Spec.NodeName != "" {
		add("pod %s is bound to node %s.", id, pod.Spec.NodeName)
		e.served = true
		return e
	}
	add("pod %s is pending.", id)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			add("the scheduler says: %s", c.Message)
		}
	}
	ours := 0
	for _, c := range claims {
		add("claim %q (%s):", c.name, c.source)
		if c.allocated != "" {
			add("  allocated on node %s", c.allocated)
		}
		for _, n := range c.needs {
			for i, a := range n.alternatives {
				prefix := "  "
				if i > 0 {
					prefix = "    or "
				}
				add("%s%s", prefix, a)
				if a.kind != kindOther {
					ours++
				}
			}
		}
	}
	if ours == 0 {
		add("no claim of the pod asks for an EFA of efakit's classes: nothing for efakit to check.")
		e.served = true
		return e
	}

	// The nodes the pod may run on, grouped by what they publish and what
	// they say of the requests.
	type group struct {
		mode     string
		problems []string
		nodes    []string
	}
	groups := map[string]*group{}
	// What the fix depends on: the causes seen, by the kind asked and the
	// mode of the nodes that could not serve it.
	type seen struct {
		cause cause
		kind  deviceKind
		mode  string
	}
	causes := map[seen]bool{}
	candidates, serving := 0, 0
	for i := range nodes {
		n := &nodes[i]
		if !podNodeFilter(pod, n) {
			continue
		}
		candidates++
		d := devices[n.Name]
		var problems []string
		var found []seen
		// Each request alone, then the single-choice requests of a kind
		// together.
		total := map[deviceKind]int64{}
		for _, c := range claims {
			for _, nd := range c.needs {
				var why []string
				var these []seen
				for _, a := range nd.alternatives {
					if cs, v := d.verdict(a); cs != causeNone {
						why = append(why, fmt.Sprintf("request %q: the node %s", a.name, v))
						these = append(these, seen{cs, a.kind, d.mode()})
					}
				}
				if len(why) == len(nd.alternatives) {
					problems = append(problems, why...)
					found = append(found, these...)
				}
				if a := nd.alternatives[0]; len(nd.alternatives) == 1 && a.kind != kindOther && !a.all {
					total[a.kind] += a.count
				}
			}
		}
		if len(problems) == 0 {
			for _, k := range []deviceKind{kindSingle, kindGroup} {
				if free := int64(d.published[k] - d.allocated[k]); total[k] > free {
					problems = append(problems, fmt.Sprintf("the requests together: %d %ss asked, the node has %d free", total[k], k, free))
					found = append(found, seen{causeHeld, k, d.mode()})
				}
			}
		}
		if len(problems) == 0 {
			serving++
		}
		for _, f := range found {
			causes[f] = true
		}
		key := d.mode() + "\x00" + strings.Join(problems, "\x00")
		g := groups[key]
		if g == nil {
			g = &group{mode: d.mode(), problems: problems}
			groups[key] = g
		}
		g.nodes = append(g.nodes, n.Name)
	}
	if candidates == 0 {
		add("no node of the %d matches the pod's node selector and required node affinity.", len(nodes))
		return e
	}
	add("nodes the pod may run on (its node selector and required node affinity): %d of %d", candidates, len(nodes))
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := groups[keys[i]], groups[keys[j]]
		if len(a.nodes) != len(b.nodes) {
			return len(a.nodes) > len(b.nodes)
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		g := groups[k]
		add("  %s in %s: %s", plural(len(g.nodes), "node"), g.mode, nodeList(g.nodes))
		if len(g.problems) == 0 {
			add("    can serve the EFA requests by kind and count")
		}
		for _, p := range g.problems {
			add("    cannot serve %s", p)
		}
	}
	if serving > 0 {
		e.served = true
		add("efakit finds %s the pod may run on with the EFAs its claims ask; what keeps it pending is in the scheduler's message (other devices, constraints, resources, taints).", plural(serving, "node"))
		return e
	}
	add("why: no node the pod may run on can serve its EFA requests.")
	var fixes []string
	fix := func(f string) {
		if !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	for _, sn := range slices.SortedFunc(maps.Keys(causes), func(a, b seen) int {
		return cmp.Or(cmp.Compare(a.cause, b.cause), cmp.Compare(a.kind, b.kind), strings.Compare(a.mode, b.mode))
	}) {
		switch {
		case sn.cause == causeNotPublished && sn.mode == modeNone:
			fix("these nodes publish no efakit device: is the plugin running there? (kubectl get resourceslices --field-selector spec.driver=dra.net,spec.nodeName=NODE)")
		case sn.cause == causeNotPublished && sn.kind == kindSingle:
			fix(fmt.Sprintf("these nodes publish EFA groups only (--groups=exclusive): ask for groups (class %s; efakit claims --groups exclusive prints templates), or run the pod on nodes in the default or mixed mode.", resources.DefaultGroupDeviceClass))
		case sn.cause == causeNotPublished && sn.kind == kindGroup:
			fix(fmt.Sprintf("these nodes publish single EFAs only (the default mode): ask for single EFAs (class %s; efakit claims prints templates), or run the pod on nodes in exclusive or mixed mode.", resources.DefaultDeviceClass))
		case sn.cause == causeTooFew:
			fix("ask for no more than a node has (efakit claims --sysfs CAPTURE prints counts that fit).")
		case sn.cause == causeHeld:
			fix("other claims hold the EFAs: the pod runs once they are released, or on more nodes.")
		}
	}
	for _, f := range fixes {
		add("fix: %s", f)
	}
	return e
}

// plural is "1 node", "3 nodes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// nodeList names the first few nodes and counts the rest.
func nodeList(names []string) string {
	const shown = 5
	sort.Strings(names)
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}
