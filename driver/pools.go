package driver

import (
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/driver/resources"
)

// driverResources is a pool in the form the kubelet plugin helper takes.
func driverResources(p resources.Pool) resourceslice.DriverResources {
	pool := resourceslice.Pool{Generation: p.Generation, Slices: make([]resourceslice.Slice, len(p.Slices))}
	for i, s := range p.Slices {
		pool.Slices[i] = resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{p.Name: pool}}
}

// poolOf is the pool of the helper's form named name.
func poolOf(name string, p resourceslice.Pool) resources.Pool {
	out := resources.Pool{Name: name, Generation: p.Generation, Slices: make([]resources.Slice, len(p.Slices))}
	for i, s := range p.Slices {
		out.Slices[i] = resources.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return out
}
