package drivertest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// Recorder is a publishing target that keeps what it was given.
type Recorder struct {
	mu    sync.Mutex
	calls []resourceslice.DriverResources
}

// PublishResources keeps a copy of res.
func (r *Recorder) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, *res.DeepCopy())
	return nil
}

// Count is how many times it was given resources.
func (r *Recorder) Count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.calls) }

// Calls are the resources it was given, in order.
func (r *Recorder) Calls() []resourceslice.DriverResources {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]resourceslice.DriverResources(nil), r.calls...)
}

// LastDevices are the devices of the last publish, by name.
func (r *Recorder) LastDevices() map[string]resourceapi.Device {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]resourceapi.Device{}
	for _, pool := range r.calls[len(r.calls)-1].Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				out[d.Name] = d
			}
		}
	}
	return out
}

// SharesPolicy checks a published EFA is shareable by n shares, each claim
// taking one by default and 1 to n on request.
func SharesPolicy(t *testing.T, d resourceapi.Device, n int64) {
	t.Helper()
	require.NotNil(t, d.AllowMultipleAllocations, d.Name)
	assert.True(t, *d.AllowMultipleAllocations, d.Name)
	c, ok := d.Capacity[resources.CapacityShares]
	require.True(t, ok, "%s has no shares capacity: %v", d.Name, d.Capacity)
	assert.Equal(t, n, c.Value.Value(), d.Name)
	require.NotNil(t, c.RequestPolicy, d.Name)
	require.NotNil(t, c.RequestPolicy.ValidRange, d.Name)
	got := []int64{c.RequestPolicy.Default.Value(), c.RequestPolicy.ValidRange.Min.Value(), c.RequestPolicy.ValidRange.Max.Value(), c.RequestPolicy.ValidRange.Step.Value()}
	assert.Equal(t, []int64{1, 1, n, 1}, got, "%s: default, min, max, step", d.Name)
}
