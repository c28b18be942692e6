package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/efakit/efakit/plugin/cdi"
)

// libfabricVisibility checks for the known libfabric failure where a
// container sees more RDMA devices than it can open. rdma-core lists RDMA
// devices through RDMA netlink, which in the kernel's shared RDMA namespace
// mode shows every RDMA device of the host whatever /dev holds. libfabric's
// EFA provider opens every device ibv_get_device_list returns (since
// ofiwg/libfabric PR 10990 to collect GIDs even when FI_EFA_IFACE filters,
// and before that it opened them all too). Until PR 12744 (August 2026) one
// device it could not open made fi_getinfo return -61 (FI_ENODATA) for the
// whole provider: libfabric issue 12708.
func (f *facts) libfabricVisibility() Check {
	visible := len(f.verbs)
	if visible == 0 {
		return Check{ID: CheckLibfabricVisibility, Status: Skip, Message: "no RDMA device with a uverbs device in sysfs"}
	}
	can := len(f.openable(false))
	cannot := visible - can
	switch {
	case can == 0:
		fix := "check --dev, and run as root"
		if f.o.Place == InPod {
			fix = "give the container EFAs through a ResourceClaim of efakit's DeviceClass, and check that the runtime applies CDI specs"
		}
		return Check{ID: CheckLibfabricVisibility, Status: Fail,
			Message: fmt.Sprintf("none of the %s visible in sysfs can be opened here: no EFA is usable", plural(visible, "RDMA device")),
			Fix:     fix}
	case cannot == 0:
		return Check{ID: CheckLibfabricVisibility, Status: Pass,
			Message: fmt.Sprintf("all %s visible in sysfs can be opened here", plural(visible, "RDMA device"))}
	}
	return Check{ID: CheckLibfabricVisibility, Status: Warn,
		Message: fmt.Sprintf("%d RDMA devices visible in sysfs cannot be opened here (%d can): libfabric without PR 12744 fails fi_getinfo with -61", cannot, can),
		Fix: "use a libfabric that includes PR 12744 (August 2026), or give the container every RDMA device of the node: " +
			"in the shared RDMA namespace mode rdma-core lists every RDMA device of the host through RDMA netlink, whatever /dev holds, " +
			"and libfabric's EFA provider opens each one (since ofiwg/libfabric PR 10990 also when FI_EFA_IFACE filters); " +
			"before PR 12744 one it cannot open made fi_getinfo return -61 (FI_ENODATA) for the whole provider (libfabric issue 12708)"}
}

// environment checks a container's libfabric variables. efakit sets none by
// default: the container's device nodes are the contract, and libfabric
// uses exactly the EFAs it can open. FI_EFA_IFACE that leaves out an EFA
// the container holds makes libfabric use a subset; FI_PROVIDER without efa
// keeps libfabric off EFA altogether.
func (f *facts) environment() Check {
	if f.o.Place == OnNode {
		return Check{ID: CheckEnvironment, Status: Skip, Message: "on a node: the libfabric environment that matters is a container's (run efakit doctor in the pod)"}
	}
	held := rdmaNames(f.openable(true))
	var parts []part

	iface, set := f.env[cdi.EnvIface]
	listed := splitList(iface, ",")
	switch {
	case !set:
		parts = append(parts, part{Pass, "no FI_EFA_IFACE: libfabric uses every EFA it can open", ""})
	case strings.TrimSpace(iface) == "all":
		parts = append(parts, part{Pass, "FI_EFA_IFACE=all: libfabric uses every EFA it can open", ""})
	case len(listed) == 0:
		parts = append(parts, part{Warn, "FI_EFA_IFACE is set but names no EFA", "unset FI_EFA_IFACE: libfabric then uses every EFA it can open"})
	default:
		var used, missing, extra []string
		for _, n := range held {
			if slices.Contains(listed, n) {
				used = append(used, n)
			} else {
				missing = append(missing, n)
			}
		}
		for _, n := range listed {
			if !slices.Contains(held, n) {
				extra = append(extra, n)
			}
		}
		switch {
		case len(missing) > 0 && f.meta != nil && len(f.meta.named) > 0 && sameSet(listed, f.meta.namedEFAs()):
			// efakit's env: libfabric: a container that sees more EFAs
			// than its claims gave it (a privileged one) is told which.
			parts = append(parts, part{Pass, fmt.Sprintf("FI_EFA_IFACE names exactly the %s of this pod's %s claims (efakit's env: libfabric); this container can open %d more",
				plural(len(listed), "EFA"), f.o.DriverName, len(missing)), ""})
		case len(missing) > 0:
			parts = append(parts, part{Fail, fmt.Sprintf("FI_EFA_IFACE names %d of the %s this container holds: libfabric uses only %s, not %s",
				len(used), plural(len(held), "EFA"), orNone(listNames(used, maxListed)), listNames(missing, maxListed)),
				fmt.Sprintf("unset FI_EFA_IFACE (libfabric then uses every EFA it can open) or list all %d", len(held))})
		case len(extra) == 0:
			parts = append(parts, part{Pass, fmt.Sprintf("FI_EFA_IFACE lists exactly the %s this container holds", plural(len(held), "EFA")), ""})
		}
		if len(extra) > 0 {
			parts = append(parts, part{Warn, fmt.Sprintf("FI_EFA_IFACE names %s, which this container cannot open", listNames(extra, maxListed)),
				"list only the EFAs the container holds, or unset FI_EFA_IFACE"})
		}
	}

	if prov, set := f.env[cdi.EnvProvider]; set {
		if providerAllowsEFA(prov) {
			parts = append(parts, part{Pass, fmt.Sprintf("FI_PROVIDER=%s", prov), ""})
		} else {
			parts = append(parts, part{Warn, fmt.Sprintf("FI_PROVIDER=%s: libfabric will not use EFA", prov), "unset FI_PROVIDER, or set it to efa"})
		}
	}
	return combine(CheckEnvironment, parts...)
}

// splitList splits a separated list, dropping blanks and empty items.
func splitList(s, sep string) []string {
	var out []string
	for _, x := range strings.Split(s, sep) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// providerAllowsEFA reports whether a FI_PROVIDER value lets libfabric use
// the efa provider: a list of providers ("efa", "efa,shm", layered
// "ofi_rxm;efa") that names it, or an exclusion list ("^tcp") that does not.
func providerAllowsEFA(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	exclude := strings.HasPrefix(v, "^")
	names := map[string]bool{}
	for _, item := range splitList(strings.TrimPrefix(v, "^"), ",") {
		for _, layer := range splitList(item, ";") {
			names[strings.ToLower(layer)] = true
		}
	}
	return names["efa"] != exclude
}

// sameSet reports whether two lists hold the same names.
func sameSet(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}

// orNone prints an empty list as "none".
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
