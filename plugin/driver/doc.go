// Package driver is the Kubernetes DRA kubelet plugin of efakit: it
// publishes a machine's EFAs as ResourceSlices and prepares them for pods
// through CDI specs and a checkpoint. It is an adapter over parts with one
// concern each: what it publishes is built by driver/resources (which
// `efakit slices` shares without linking the plugin's client, gRPC and
// metrics), the slices are written by driver/publishing, the checks for
// another owner of the EFAs are driver/owners, the claims' status.devices
// driver/claimstatus, the checkpoint driver/checkpoint, the kubelet's pod
// list driver/podresources, and the operations driver/metrics,
// driver/events and driver/uevents. It adds no
// hardware knowledge of its own: everything it publishes comes from the
// topology package, and EFAs are read through package efa. Serve's run
// (run.go) starts its activities and stops them, in the order
// docs/design.md lists.
package driver
