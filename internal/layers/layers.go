// Package layers holds the rule of which efakit package may import which,
// as docs/design.md draws the layers; its test checks every package of the
// library's module and of the plugin's (plugin/) against it. It has no code
// of its own.
package layers

// Allowed maps each package (its path inside the module) to the efakit
// packages it may import. A package missing here fails the test: a new
// package takes its place in the layers when it is made.
var Allowed = map[string][]string{
	// The library: sysfs to typed devices to the topology.
	"sysfs": nil,
	"pcie":  {"sysfs"},
	"efa":   {"pcie", "sysfs"},
	// Health grades from samples of counters and ports: no sysfs of its own.
	"efa/health": nil,
	// The kernel's RDMA namespace mode over netlink, apart: importing efa
	// or topology does not link netlink.
	"rdmans":          nil,
	"host":            {"pcie", "sysfs"},
	"internal/uevent": nil,
	"neuron":          {"pcie", "sysfs"},
	"topology":        {"efa", "host", "neuron", "pcie", "sysfs"},
	"snapshot":        {"efa", "gpudirect", "host", "neuron", "pcie", "sysfs"},
	// GPUDirect readiness per GPU-EFA pair: the topology plus the NVIDIA
	// and efa drivers' own files.
	"gpudirect": {"efa", "host", "neuron", "pcie", "sysfs", "topology"},

	// What is published and written, from the library's answers and the
	// API types alone.
	"plugin/cdi":                                  {"internal/atomicfile"},
	"plugin/driver/checkpoint":                    {"internal/atomicfile"},
	"plugin/driver/resources":                     {"internal/pciids", "efa", "efa/health", "host", "neuron", "pcie", "sysfs", "topology"},
	"plugin/driver/podresources":                  nil,
	"plugin/driver/podresources/podresourcestest": nil,
	"plugin/doctor":                               {"plugin/internal/live", "rdmans", "plugin/cdi", "plugin/driver/resources", "efa", "gpudirect", "host", "neuron", "pcie", "sysfs", "topology"},

	// The kubelet plugin's parts, one concern each: operations (metrics,
	// Events, uevents), publishing and the checks for another owner. None
	// knows the Plugin; metrics reads EFAs through efa alone.
	"plugin/driver/metrics": {"efa", "pcie", "sysfs"},
	"plugin/driver/events":  nil,
	"plugin/driver/uevents": {"internal/uevent"},
	// The prepared claims' status.devices: written by server-side apply,
	// from entries the claim state builds; no hardware knowledge of its own.
	"plugin/driver/claimstatus": nil,
	// Each prepared device's RDMA traffic, from the EFAs' counters: its
	// TrafficSeen condition and its own file.
	"plugin/driver/traffic": {"plugin/driver/claimstatus", "internal/atomicfile", "efa", "pcie", "sysfs"},
	// The inventory: the last scan's snapshot, built from the topology.
	"plugin/driver/inventory": {"plugin/driver/resources", "efa", "efa/health", "gpudirect", "host", "neuron", "pcie", "sysfs", "topology"},
	// The parts that own state, each reading the inventory's snapshots:
	// publishing, the owner check, and the claim state (the one lock a
	// prepare takes).
	"plugin/driver/publishing": {"plugin/driver/events", "plugin/driver/inventory", "plugin/driver/metrics", "plugin/driver/resources", "efa", "host", "plugin/internal/informerwait", "neuron", "pcie", "sysfs", "topology"},
	"plugin/driver/owners":     {"plugin/internal/live", "rdmans", "plugin/driver/events", "plugin/driver/metrics", "plugin/driver/resources", "efa", "plugin/internal/informerwait", "pcie", "sysfs"},
	// The libfabric environment a claim's CDI devices set, and the
	// containers' check: decided on what the claim state hands it.
	"plugin/driver/claimenv": {"plugin/cdi", "plugin/driver/checkpoint", "plugin/driver/podresources", "plugin/driver/resources"},
	"plugin/driver/claims": {"plugin/cdi", "plugin/driver/claimenv", "plugin/driver/checkpoint", "plugin/driver/claimstatus", "plugin/driver/events", "plugin/driver/inventory", "plugin/driver/metrics",
		"plugin/driver/podresources", "plugin/driver/resources", "efa", "efa/health", "gpudirect", "host", "internal/atomicfile", "neuron", "pcie", "sysfs", "topology"},

	// The kubelet plugin: an adapter over the parts above.
	"plugin/driver": {"internal/placed", "plugin/internal/live", "plugin/cdi", "plugin/driver/checkpoint", "plugin/driver/claims", "plugin/driver/claimstatus", "plugin/driver/events", "plugin/driver/inventory", "plugin/driver/metrics", "plugin/driver/owners", "plugin/driver/podresources",
		"plugin/driver/publishing", "plugin/driver/resources", "plugin/driver/traffic", "plugin/driver/uevents", "efa", "efa/health", "gpudirect", "host", "internal/uevent",
		"internal/atomicfile", "neuron", "pcie", "sysfs", "topology"},

	// The commands.
	"plugin/cmd/efakit":        {"internal/placed", "internal/pciids", "plugin/doctor", "plugin/driver/resources", "efa", "gpudirect", "host", "neuron", "pcie", "snapshot", "sysfs", "topology"},
	"plugin/cmd/efakit-plugin": {"plugin/driver", "plugin/driver/podresources", "plugin/driver/resources", "plugin/driver/uevents", "efa/health"},

	// Tools and test support.
	// What the tests of driver and its parts share (only tests import it).
	"plugin/driver/internal/drivertest": {"plugin/driver/claimstatus", "plugin/driver/resources", "sysfs"},
	"plugin/allocfeatures":              nil,
	"internal/apicheck":                 nil,
	"internal/placed":                   {"efa", "neuron", "pcie", "topology"},
	"internal/sysread":                  {"sysfs"},
	"internal/sysattr":                  nil,
	"internal/linkpath":                 nil,
	"internal/names":                    nil,
	"internal/fserr":                    nil,
	// Vendor and device names from pci.ids (jaypipes/pcidb): apart, so
	// that importing pcie does not link net/http.
	"internal/pciids":              nil,
	"internal/atomicfile":          nil,
	"plugin/internal/live":         {"rdmans"},
	"plugin/internal/informerwait": nil,
	"internal/fakesys":             {"pcie", "sysfs"},
	"internal/gdrcases":            {"internal/fakesys", "pcie"},
	"internal/fixturegen":          {"internal/fixturegen/machines", "sysfs"},
	"internal/fixturegen/machines": {"internal/fakesys", "sysfs"},
	"internal/fixturegen/scale":    {"internal/fakesys", "sysfs"},
	"internal/fixturegen/seeds":    {"internal/fakesys", "pcie", "sysfs"},
	"internal/fleet":               nil,
	"internal/fleet/gen":           {"internal/atomicfile", "internal/fleet"},
	"internal/layers":              nil,
	"plugin/internal/modzip":       {"sysfs"},
	"internal/testfixture":         nil,
	"internal/testtimes":           nil,
	"internal/doccheck":            nil,
	"plugin/internal/chartdoc":     nil,
	"plugin/internal/msgdoc":       nil,
}

// NoCluster are the packages that reach no cluster and serve nothing: the
// library and what it writes. They import no Kubernetes client, gRPC or
// Prometheus (the API types are allowed where they publish).
var NoCluster = []string{"sysfs", "pcie", "efa", "host", "internal/uevent", "neuron", "topology", "snapshot",
	"plugin/cdi", "plugin/driver/checkpoint", "plugin/driver/resources"}

// NoKubernetes are the packages that import nothing of Kubernetes: the
// hardware library.
var NoKubernetes = []string{"sysfs", "pcie", "efa", "host", "internal/uevent", "neuron", "topology", "snapshot"}

// Everywhere are the packages at the bottom, which any package may import:
// the name checks, the PathError stripping, the link-resolving reader
// (at sysfs's level) and the paths and formats more than one reader uses.
var Everywhere = []string{"internal/names", "internal/fserr", "internal/linkpath", "internal/sysread", "internal/sysattr"}
