package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// These tests run EFAs shared by capacity (--sharing=capacity) through the
// plugin as the kubelet and the scheduler use it: what is published, what
// the scheduler's allocator makes of it, and how prepare holds the shares
// of one EFA apart from a claim that wants it alone.

// share is one allocation result of an EFA: with an id, a share of an EFA
// shared by capacity consuming shares of it; without, the EFA alone.
type share struct {
	request, device, id string
	shares              int64
}

// sharedClaim is a claim the scheduler allocated the given shares to.
func sharedClaim(name, uid string, shares ...share) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, s := range shares {
		r := resourceapi.DeviceRequestAllocationResult{Request: s.request, Driver: "dra.net", Pool: node, Device: s.device}
		if s.id != "" {
			id := types.UID(s.id)
			r.ShareID = &id
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{resources.CapacityShares: *resource.NewQuantity(s.shares, resource.DecimalSI)}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

// sharesPolicy checks a published EFA is shareable by n shares, each claim
// taking one by default and 1 to n on request.
func sharesPolicy(t *testing.T, d resourceapi.Device, n int64) {
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

const (
	shareA = "5a5a5a5a-0000-4000-8000-00000000000a"
	shareB = "5a5a5a5a-0000-4000-8000-00000000000b"
)

// TestSharingPrepareShares: two independent claims holding shares of one
// EFA, on a node published with --sharing=capacity, are both prepared,
// each with its own CDI spec naming the EFA's one uverbs node and each
// result device carrying its share back to the kubelet; the checkpoint
// records each share. Unpreparing one leaves the other prepared, spec and
// all.
func TestSharingPrepareShares(t *testing.T) {
	const dev = "efa-0000-4f-00-0"
	a := sharedClaim("share-a", "5a000000-0000-0000-0000-000000000001", share{"efa", dev, shareA, 1})
	b := sharedClaim("share-b", "5a000000-0000-0000-0000-000000000002", share{"efa", dev, shareB, 3})
	n := newNode(t, p5, a, b)
	n.sharing, n.shares = resources.SharingCapacity, 4
	n.start()
	defer n.stop()
	n.waitSlices()
	l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, l.Items, 1)
	require.Len(t, l.Items[0].Spec.Devices, 32)
	for _, d := range l.Items[0].Spec.Devices {
		sharesPolicy(t, d, 4)
	}

	uverbs0 := []string{"/dev/infiniband/uverbs0 231:192"}
	for c, id := range map[*resourceapi.ResourceClaim]string{a: shareA, b: shareB} {
		r := n.prepare(c)[string(c.UID)]
		require.Empty(t, r.Error, c.Name)
		require.Len(t, r.Devices, 1, c.Name)
		assert.Equal(t, dev, r.Devices[0].DeviceName)
		assert.Equal(t, id, r.Devices[0].GetShareId(), "%s: the kubelet gets the share back", c.Name)
		nodes, _ := n.specNodes(string(c.UID))
		assert.Equal(t, uverbs0, nodes, "%s: its own spec, the EFA's node", c.Name)
	}
	st, err := checkpoint.NewStore(filepath.Join(n.dir, "plugins", "dra.net")).Load(bootA)
	require.NoError(t, err)
	assert.Equal(t, shareA, st.Claims[string(a.UID)].Devices[0].ShareID)
	assert.Equal(t, int64(1), st.Claims[string(a.UID)].Devices[0].Shares)
	assert.Equal(t, shareB, st.Claims[string(b.UID)].Devices[0].ShareID)
	assert.Equal(t, int64(3), st.Claims[string(b.UID)].Devices[0].Shares)
	raw, err := os.ReadFile(filepath.Join(n.dir, "plugins", "dra.net", checkpoint.FileName))
	require.NoError(t, err)
	var v struct{ Version int }
	require.NoError(t, json.Unmarshal(raw, &v))
	assert.Equal(t, 3, v.Version, "the file is version 3")

	assert.Empty(t, n.unprepare(a)[string(a.UID)].Error)
	_, err = os.Stat(filepath.Join(n.cdiDir(), "dra.net-"+string(a.UID)+".json"))
	assert.True(t, os.IsNotExist(err), "a's spec removed: %v", err)
	nodes, _ := n.specNodes(string(b.UID))
	assert.Equal(t, uverbs0, nodes, "b's spec stays")
	again := n.prepare(b)[string(b.UID)]
	assert.Empty(t, again.Error)
	assert.Equal(t, shareB, again.Devices[0].GetShareId())
}

// TestSharingRefusesMix: an EFA held as a share is not prepared for a
// claim that wants it alone, and one held alone not for a share, each
// refusal naming the claim that holds it; once the last share is
// unprepared, the claim that wants the EFA alone gets it.
func TestSharingRefusesMix(t *testing.T) {
	held := sharedClaim("held", "5b000000-0000-0000-0000-000000000001", share{"efa", "efa-0000-4f-00-0", shareA, 1})
	alone := claim("alone", "5b000000-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
	excl := claim("excl", "5b000000-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	late := sharedClaim("late", "5b000000-0000-0000-0000-000000000004", share{"efa", "efa-0000-50-00-0", shareB, 1})
	n := newNode(t, p5, held, alone, excl, late)
	n.sharing = resources.SharingCapacity
	n.start()
	defer n.stop()

	require.Empty(t, n.prepare(held)[string(held.UID)].Error)
	assert.Contains(t, n.prepare(alone)[string(alone.UID)].Error,
		"device efa-0000-4f-00-0 is already prepared for claim default/held ("+string(held.UID)+") as a share: a claim that holds it alone must wait until every share is unprepared")
	require.Empty(t, n.prepare(excl)[string(excl.UID)].Error)
	assert.Contains(t, n.prepare(late)[string(late.UID)].Error,
		"device efa-0000-50-00-0 is already prepared for claim default/excl ("+string(excl.UID)+") alone: it cannot be shared")

	require.Empty(t, n.unprepare(held)[string(held.UID)].Error)
	assert.Empty(t, n.prepare(alone)[string(alone.UID)].Error, "no share left: the EFA is free")
}

// TestSharingMetricsLabels: an EFA shared by two claims carries both in its
// claim labels, comma-separated in UID order (not name order), so one
// series per EFA still says every claim that uses it; after one is
// unprepared, the other alone.
func TestSharingMetricsLabels(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	p := newTestPlugin(t, root, func(o *driver.PluginOptions) {
		o.Config.Sharing = resources.SharingCapacity
	})
	p.EFAMetrics().CacheFor = 0
	ctx := context.Background()
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	// zeta's UID sorts first.
	zeta := sharedClaim("zeta", "5c000000-0000-0000-0000-000000000001", share{"efa", "efa-0000-4f-00-0", shareA, 1})
	alpha := sharedClaim("alpha", "5c000000-0000-0000-0000-000000000002", share{"efa", "efa-0000-4f-00-0", shareB, 1})
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{alpha, zeta})
	require.NoError(t, err)
	require.NoError(t, res[alpha.UID].Err)
	require.NoError(t, res[zeta.UID].Err)

	owner := func() [3]string {
		f := find(gather(t, p.Registry()), "efakit_efa_tx_bytes_total", map[string]string{"dra_device": "efa-0000-4f-00-0"})
		require.Len(t, f, 1, "one series for the shared EFA")
		return [3]string{f[0].labels["claim_namespace"], f[0].labels["claim_name"], f[0].labels["claim_uid"]}
	}
	assert.Equal(t, [3]string{"default,default", "zeta,alpha", string(zeta.UID) + "," + string(alpha.UID)}, owner())

	u, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: zeta.UID}})
	require.NoError(t, err)
	require.NoError(t, u[zeta.UID])
	assert.Equal(t, [3]string{"default", "alpha", string(alpha.UID)}, owner())
}

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
	rec := &recorder{}
	p.SetPublisher(rec)
	ctx := context.Background()
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	devs := lastDevices(rec)
	require.Len(t, devs, 32)
	for _, d := range devs {
		sharesPolicy(t, d, 8)
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
	devs = lastDevices(rec)
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
