// Package driver is the Kubernetes DRA kubelet plugin of efakit: it
// publishes a machine's EFAs as ResourceSlices and prepares them for pods
// through CDI specs and a checkpoint. What it publishes (devices, slices,
// DeviceClasses, claim templates) is built by package driver/resources,
// which `efakit slices` shares without linking the plugin's client, gRPC
// and metrics. It adds no hardware knowledge of its own: everything it
// publishes comes from the topology package.
package driver
