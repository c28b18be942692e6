// Package layers holds the rule of which efakit package may import which,
// as docs/design.md draws the layers; its test checks every package of the
// module against it. It has no code of its own.
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
	"efa/health":  nil,
	"host":        {"pcie", "sysfs"},
	"host/uevent": nil,
	"neuron":      {"pcie", "sysfs"},
	"topology":    {"efa", "host", "neuron", "pcie", "sysfs"},
	"snapshot":    {"efa", "gpudirect", "host", "neuron", "pcie", "sysfs"},
	// GPUDirect readiness per GPU-EFA pair: the topology plus the NVIDIA
	// and efa drivers' own files.
	"gpudirect": {"efa", "host", "neuron", "pcie", "sysfs", "topology"},

	// What is published and written, from the library's answers and the
	// API types alone.
	"cdi":                                  {"internal/atomicfile"},
	"driver/checkpoint":                    {"internal/atomicfile"},
	"driver/resources":                     {"efa", "efa/health", "host", "neuron", "pcie", "sysfs", "topology"},
	"driver/podresources":                  nil,
	"driver/podresources/podresourcestest": nil,
	"doctor":                               {"cdi", "driver/resources", "efa", "gpudirect", "host", "neuron", "pcie", "sysfs", "topology"},

	// The kubelet plugin's parts, one concern each: operations (metrics,
	// Events, uevents), publishing and the checks for another owner. None
	// knows the Plugin; metrics reads EFAs through efa alone.
	"driver/metrics": {"efa", "pcie", "sysfs"},
	"driver/events":  nil,
	"driver/uevents": {"host/uevent"},
	// The prepared claims' status.devices: written by server-side apply,
	// from entries the claim state builds; no hardware knowledge of its own.
	"driver/claimstatus": nil,
	// The inventory: the last scan's snapshot, built from the topology.
	"driver/inventory": {"driver/resources", "efa", "efa/health", "gpudirect", "host", "neuron", "pcie", "sysfs", "topology"},
	// The parts that own state, each reading the inventory's snapshots:
	// publishing, the owner check, and the claim state (the one lock a
	// prepare takes).
	"driver/publishing": {"driver/events", "driver/inventory", "driver/metrics", "driver/resources", "efa", "host", "internal/informerwait", "neuron", "pcie", "sysfs", "topology"},
	"driver/owners":     {"driver/events", "driver/metrics", "driver/resources", "efa", "internal/informerwait", "pcie", "sysfs"},
	"driver/claims": {"cdi", "driver/checkpoint", "driver/claimstatus", "driver/events", "driver/inventory", "driver/metrics",
		"driver/podresources", "driver/resources", "efa", "efa/health", "gpudirect", "host", "internal/atomicfile", "neuron", "pcie", "sysfs", "topology"},

	// The kubelet plugin: an adapter over the parts above.
	"driver": {"cdi", "driver/checkpoint", "driver/claims", "driver/claimstatus", "driver/events", "driver/inventory", "driver/metrics", "driver/owners", "driver/podresources",
		"driver/publishing", "driver/resources", "driver/uevents", "efa", "efa/health", "gpudirect", "host", "host/uevent",
		"internal/atomicfile", "neuron", "pcie", "sysfs", "topology"},

	// The commands.
	"cmd/efakit":        {"doctor", "driver/resources", "efa", "gpudirect", "host", "neuron", "pcie", "snapshot", "sysfs", "topology"},
	"cmd/efakit-plugin": {"driver", "driver/podresources", "driver/resources", "driver/uevents", "efa/health"},

	// Tools and test support.
	"internal/allocfeatures":       nil,
	"internal/atomicfile":          nil,
	"internal/informerwait":        nil,
	"internal/fakesys":             {"pcie", "sysfs"},
	"internal/gdrcases":            {"internal/fakesys", "pcie"},
	"internal/fixturegen":          {"internal/fixturegen/machines", "sysfs"},
	"internal/fixturegen/machines": {"internal/fakesys", "sysfs"},
	"internal/fixturegen/scale":    {"internal/fakesys", "sysfs"},
	"internal/fixturegen/seeds":    {"internal/fakesys", "pcie", "sysfs"},
	"internal/fleet":               nil,
	"internal/fleet/gen":           {"internal/atomicfile", "internal/fleet"},
	"internal/layers":              nil,
	"internal/modzip":              {"sysfs"},
	"internal/testfixture":         nil,
	"internal/testtimes":           nil,
	"internal/doccheck":            nil,
	"internal/chartdoc":            nil,
	"internal/msgdoc":              nil,
}

// NoCluster are the packages that reach no cluster and serve nothing: the
// library and what it writes. They import no Kubernetes client, gRPC or
// Prometheus (the API types are allowed where they publish).
var NoCluster = []string{"sysfs", "pcie", "efa", "host", "host/uevent", "neuron", "topology", "snapshot",
	"cdi", "driver/checkpoint", "driver/resources"}

// NoKubernetes are the packages that import nothing of Kubernetes: the
// hardware library.
var NoKubernetes = []string{"sysfs", "pcie", "efa", "host", "host/uevent", "neuron", "topology", "snapshot"}
