package resources_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// These tests publish EFAs shared by capacity (--sharing=capacity): the
// policy every single EFA is published with, and what the scheduler's
// allocator makes of it.

// p5 is the p5.48xlarge's capture: 32 EFAs, four per GPU.
const p5 = "../../../testdata/sysfs/p5.48xlarge.sysfs"

// TestSharingPolicy: with --sharing=capacity every single EFA of every
// fixture is published shareable by its shares (DefaultShares when none
// are given), as Build makes the pool and as Published grades it (what the
// plugin and `efakit slices` publish); without it no EFA is shareable.
func TestSharingPolicy(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "../../..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(path)
			require.NoError(t, err)
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			nEFA := len(topo.Of(topology.KindEFA))
			for _, tc := range []struct{ shares, want int64 }{{0, resources.DefaultShares}, {2, 2}, {4, 4}, {8, 8}, {resources.MaxShares, resources.MaxShares}} {
				cfg := resources.Config{NodeName: node, Sharing: resources.SharingCapacity, Shares: tc.shares}
				built, err := resources.Build(topo, cfg)
				require.NoError(t, err)
				published, err := resources.Published(topo, cfg)
				require.NoError(t, err)
				for what, pool := range map[string]resources.Pool{"built": built, "published": published} {
					n := 0
					for _, s := range resources.Slices(pool, cfg) {
						for _, d := range s.Spec.Devices {
							drivertest.SharesPolicy(t, d, tc.want)
							n++
						}
					}
					assert.Equal(t, nEFA, n, "%s, %d shares: every EFA", what, tc.shares)
				}
			}
			cfg := resources.Config{NodeName: node}
			pool, err := resources.Build(topo, cfg)
			require.NoError(t, err)
			for _, s := range resources.Slices(pool, cfg) {
				for _, d := range s.Spec.Devices {
					assert.Nil(t, d.AllowMultipleAllocations, d.Name)
					assert.NotContains(t, d.Capacity, resources.CapacityShares, d.Name)
				}
			}
		})
	}
}

// sharingCluster is cluster (templates_test.go) for a node published with
// --sharing=capacity: the allocator's state keeps shares and their
// consumed capacity apart from whole devices, as kube-scheduler's does
// (dynamicresources.foreachAllocatedDevice).
type sharingCluster struct {
	t      *testing.T
	slices []*resourceapi.ResourceSlice
	state  structured.AllocatedState
	n      int
}

func newSharingCluster(t *testing.T, shares int64) *sharingCluster {
	t.Helper()
	root, err := sysfs.Open(p5)
	require.NoError(t, err)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	cfg := resources.Config{NodeName: node, Sharing: resources.SharingCapacity, Shares: shares}
	pool, err := resources.Build(topo, cfg)
	require.NoError(t, err)
	c := &sharingCluster{t: t, slices: resources.Slices(pool, cfg), state: structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}}
	for i, s := range c.slices {
		s.Name = fmt.Sprintf("%sslice%d", s.GenerateName, i)
	}
	return c
}

// allocate allocates one claim of one EFA of the single-EFA class, asking
// for the given capacity (none: the default share); nil when it does not
// fit.
func (c *sharingCluster) allocate(capacity map[resourceapi.QualifiedName]resource.Quantity) *resourceapi.AllocationResult {
	c.t.Helper()
	c.n++
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("c%d", c.n), UID: types.UID(fmt.Sprintf("uid-%d", c.n))}}
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: resources.DefaultDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if capacity != nil {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: capacity}
	}
	cl.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: req}}
	cls := classes{}
	for _, dc := range resources.DeviceClasses(resources.ClassOptions{}) {
		cls[dc.Name] = dc
	}
	ctx := context.Background()
	alloc, err := structured.NewAllocator(ctx, allocfeatures.Scheduler137(), c.state, cls, c.slices, allocfeatures.Cache())
	require.NoError(c.t, err)
	res, err := alloc.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{cl})
	require.NoError(c.t, err)
	if len(res) == 0 {
		return nil
	}
	for _, r := range res[0].Devices.Results {
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			c.state.AllocatedDevices.Insert(id)
			continue
		}
		c.state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		c.state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
	}
	return &res[0]
}

// consumed is how many shares an allocation result consumes.
func consumed(r resourceapi.DeviceRequestAllocationResult) int64 {
	q := r.ConsumedCapacity[resources.CapacityShares]
	return q.Value()
}

// TestSharingAllocator: kube-scheduler 1.37's allocator on a p5 published
// with two shares per EFA: 64 independent one-EFA claims fit and the 65th
// does not, each EFA given to exactly two of them, each result a share of
// its own consuming one; a claim asking for both shares takes a whole
// EFA, so 32 of them fill the node. The claim names the capacity as
// published, "shares": the allocator compares the keys as written, and
// "dra.net/shares" matches no capacity of the device.
func TestSharingAllocator(t *testing.T) {
	t.Parallel()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	t.Run("one share each", func(t *testing.T) {
		c := newSharingCluster(t, 2)
		claims := map[string]int{}
		shareIDs := sets.New[types.UID]()
		for i := range 64 {
			r := c.allocate(nil)
			require.NotNil(t, r, "claim %d does not fit", i)
			require.Len(t, r.Devices.Results, 1)
			d := r.Devices.Results[0]
			require.NotNil(t, d.ShareID, "a share")
			shareIDs.Insert(*d.ShareID)
			assert.Equal(t, int64(1), consumed(d))
			claims[d.Device]++
		}
		assert.Nil(t, c.allocate(nil), "a 65th claim does not fit")
		assert.Len(t, claims, 32)
		for dev, k := range claims {
			assert.Equal(t, 2, k, dev)
		}
		assert.Equal(t, 64, shareIDs.Len(), "a share ID per allocation")
	})
	t.Run("both shares: a whole EFA", func(t *testing.T) {
		c := newSharingCluster(t, 2)
		for i := range 32 {
			r := c.allocate(map[resourceapi.QualifiedName]resource.Quantity{"shares": q(2)})
			require.NotNil(t, r, "claim %d does not fit", i)
			assert.Equal(t, int64(2), consumed(r.Devices.Results[0]))
		}
		assert.Nil(t, c.allocate(nil), "no share left")
	})
	t.Run("the capacity key", func(t *testing.T) {
		c := newSharingCluster(t, 2)
		assert.Nil(t, c.allocate(map[resourceapi.QualifiedName]resource.Quantity{"dra.net/shares": q(2)}), "dra.net/shares matches no capacity")
		assert.Nil(t, c.allocate(map[resourceapi.QualifiedName]resource.Quantity{"shares": q(3)}), "over the shares")
		r := c.allocate(map[resourceapi.QualifiedName]resource.Quantity{"shares": q(2)})
		require.NotNil(t, r)
		assert.Equal(t, int64(2), consumed(r.Devices.Results[0]))
	})
}
