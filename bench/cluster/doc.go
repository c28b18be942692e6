// Package cluster measures efakit through the real Kubernetes components
// test/e2e runs (its harness package: etcd, kube-apiserver, kube-scheduler
// and kube-controller-manager on loopback, and a real node: a kubelet,
// containerd and runc on this machine):
//
//   - the fleet harness (scale_test.go, make scale): thousands of Node
//     objects with each shape's slices, bursts of pods and churn, what
//     the scheduler and the API server spend;
//   - the plugin's own API cost (plugin_fleet_test.go, make plugin-fleet):
//     real plugin processes against one API server whose audit log counts
//     their requests;
//   - pod start through the real node (podstart_test.go, make burst): the
//     percentiles of bursts of pods with claims and without, and where
//     the time went;
//   - the plugin's memory on a p5 (memory_test.go), with its budget.
//
// TestScaleSmoke, TestPluginFleetSmoke and TestPluginMemory run in make
// e2e; the rest run what the environment asks (the make targets above).
// It is a module of its own so that the Kubernetes binaries' pins never
// become dependencies of bench, whose harness compares libraries on
// fixtures alone.
package cluster
