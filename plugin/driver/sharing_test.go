package driver_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// These tests run EFAs shared by capacity (--sharing=capacity) through the
// plugin as the kubelet uses it: what is published. What the scheduler's
// allocator makes of the published EFAs is driver/resources'
// TestSharingAllocator; how prepare holds the shares of one EFA apart from
// a claim that wants it alone is driver/claims' sharing_test.go.

// TestSharingDropped: with --sharing=capacity every single EFA is
// published shareable; where the API server drops the consumable-capacity
// fields (DRAConsumableCapacity off), the plugin publishes the EFAs for
// one claim at a time from the next publish on, as it withholds unhealthy
// EFAs where it drops taints.
func TestSharingDropped(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	var stopped error
	p := newTestPlugin(t, root, func(o *driver.PluginOptions) {
		o.Config.Sharing, o.Config.Shares = resources.SharingCapacity, 8
		o.Hooks.Stop = func(err error) { stopped = err }
	})
	rec := &drivertest.Recorder{}
	p.SetPublisher(rec)
	ctx := context.Background()
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	devs := rec.LastDevices()
	require.Len(t, devs, 32)
	for _, d := range devs {
		drivertest.SharesPolicy(t, d, 8)
	}

	d := devs["efa-0000-4f-00-0"]
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{d}}}
	actual := desired.DeepCopy()
	actual.Spec.Devices[0].AllowMultipleAllocations, actual.Spec.Devices[0].Capacity = nil, nil
	dropped := &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: desired, ActualSlice: actual}
	require.Equal(t, []string{"DRAConsumableCapacity"}, dropped.DisabledFeatures())
	p.HandleError(ctx, dropped, "publish")
	require.NoError(t, stopped, "not fatal")
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	devs = rec.LastDevices()
	require.Len(t, devs, 32, "every EFA still published")
	for _, d := range devs {
		assert.Nil(t, d.AllowMultipleAllocations, d.Name)
		assert.NotContains(t, d.Capacity, resources.CapacityShares, d.Name)
	}
}

// TestSharingDroppedByServer: the same through Serve, with an API server
// that drops allowMultipleAllocations and capacity from the slices it
// stores: the slice controller reports it, the plugin says so in an Event
// on the Node, and its next publish (here after standing aside beside
// AWS's device plugin for a while) asks for no sharing.
func TestSharingDroppedByServer(t *testing.T) {
	n := newNode(t, p5)
	n.sharing = resources.SharingCapacity
	var mu sync.Mutex
	var asked []bool // by create or update: whether it asked for sharing
	strip := func(a k8stesting.Action) (bool, runtime.Object, error) {
		var s *resourceapi.ResourceSlice
		if a, ok := a.(interface{ GetObject() runtime.Object }); ok { // a create or an update
			s, _ = a.GetObject().(*resourceapi.ResourceSlice)
		}
		if s == nil || len(s.Spec.Devices) == 0 {
			return false, nil, nil
		}
		mu.Lock()
		asked = append(asked, s.Spec.Devices[0].AllowMultipleAllocations != nil)
		mu.Unlock()
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].AllowMultipleAllocations, s.Spec.Devices[i].Capacity = nil, nil
		}
		return false, nil, nil // stored by the tracker, as stripped
	}
	n.client.PrependReactor("create", "resourceslices", strip)
	n.client.PrependReactor("update", "resourceslices", strip)
	n.start()
	defer n.stop()
	require.Eventually(t, func() bool {
		for _, e := range nodeEvents(t, n.client) {
			if strings.Contains(e.Message, "the API server drops allowMultipleAllocations") {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the plugin says the server drops sharing")
	mu.Lock()
	assert.True(t, asked[0], "the first slices ask for sharing")
	mu.Unlock()

	n.setEFACapacity("32")
	require.Eventually(t, func() bool { return sliceCount(n) == 0 }, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	before := len(asked)
	mu.Unlock()
	n.setEFACapacity("")
	require.Eventually(t, func() bool { return sliceCount(n) == 1 }, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, len(asked), before)
	assert.False(t, asked[len(asked)-1], "published again without sharing")
}
