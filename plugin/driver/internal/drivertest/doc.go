// Package drivertest holds what the tests of the kubelet plugin's driver
// and its parts share: the kubelet's and the container runtime's side of
// a prepared claim (claims, pods, the kubelet's CDI device IDs for a
// container, the runtime's CDI injection), the plugin's metrics and logs
// as the tests read them, and a claim's status entries. Only tests import
// it.
package drivertest
