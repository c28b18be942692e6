package resources

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// AutoModeLabel and AutoModeValue mark an EKS Auto Mode node, which ships
// AWS's own DRA driver under the driver name dra.net: efakit stands aside
// there, and the chart keeps off such nodes.
const (
	AutoModeLabel = "eks.amazonaws.com/compute-type"
	AutoModeValue = "auto"
)

// DevicePluginResource is the extended resource of AWS's EFA device plugin:
// where a Node's capacity shows it, that plugin owns the node's EFAs.
const DevicePluginResource = "vpc.amazonaws.com/efa"

// OwnSlice reports whether a ResourceSlice of driverName is one efakit
// writes: every device is named and kinded as efakit names and kinds them
// (efa-..., kind efa or efa-group) and every counter set is a root's
// (efas-...). A slice of the same driver name that holds anything else was
// written by another publisher of that name (AWS's DRA driver on an Auto
// Mode node, say). An empty slice says nothing about its writer and counts
// as efakit's.
func OwnSlice(s *resourceapi.ResourceSlice, driverName string) bool {
	return s.Spec.Driver == driverName && notOurs(s) == ""
}

// notOurs names what in a slice efakit does not write ("device eth0",
// "counter set x"); "" when nothing.
func notOurs(s *resourceapi.ResourceSlice) string {
	for _, d := range s.Spec.Devices {
		kind := d.Attributes[AttrKind].StringValue
		if kind == nil || (*kind != KindEFA && *kind != KindGroup) || !strings.HasPrefix(d.Name, "efa-") {
			return "device " + d.Name
		}
	}
	for _, c := range s.Spec.SharedCounters {
		if !strings.HasPrefix(c.Name, "efas-") {
			return "counter set " + c.Name
		}
	}
	return ""
}

// ForeignSlices returns, for the slices of driverName on node, why each one
// that efakit did not write is someone else's ("ResourceSlice X (pool P,
// device Y)"), so that a second publisher of the driver name is named, not
// guessed at.
func ForeignSlices(slices []resourceapi.ResourceSlice, driverName, node string) []string {
	var out []string
	for i := range slices {
		s := &slices[i]
		if s.Spec.Driver != driverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		if what := notOurs(s); what != "" {
			out = append(out, fmt.Sprintf("ResourceSlice %s (pool %s, %s)", s.Name, s.Spec.Pool.Name, what))
		}
	}
	return out
}
