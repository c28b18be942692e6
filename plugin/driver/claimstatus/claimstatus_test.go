package claimstatus_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/efakit/efakit/plugin/driver/claimstatus"
)

const (
	node = "ip-10-0-0-1"
	uid  = types.UID("7d3f1c2a-0b4e-4f5a-9c6d-8e7f0a1b2c3d")
)

// allocated is a claim allocated two EFAs of this node and a GPU of
// another driver, whose entry that driver wrote.
func allocated() *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: uid}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "efas", Driver: "dra.net", Pool: node, Device: "efa-0000-4f-00-0"},
		{Request: "efas", Driver: "dra.net", Pool: node, Device: "efa-0000-50-00-0"},
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"},
	}}}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "GPUReady", LastTransitionTime: metav1.NewTime(time.Unix(1e9, 0))}}}}
	return c
}

// outcomes counts a Writer's outcomes.
type outcomes struct {
	mu sync.Mutex
	n  map[claimstatus.Outcome]int
}

func (o *outcomes) observe(out claimstatus.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[claimstatus.Outcome]int{}
	}
	o.n[out]++
}

func (o *outcomes) get(out claimstatus.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[out]
}

func start(t *testing.T, client *fake.Clientset) (*claimstatus.Writer, *outcomes, *testingclock.FakeClock) {
	t.Helper()
	o := &outcomes{}
	clk := testingclock.NewFakeClock(time.Unix(2e9, 0))
	w := claimstatus.New(claimstatus.Options{Client: client, DriverName: "dra.net", Pool: node, Observe: o.observe, Backoff: time.Millisecond, Now: clk.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, o, clk
}

func want(healthy bool) claimstatus.Claim {
	h := claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionTrue, Reason: "Healthy", Message: "port ACTIVE"}
	if !healthy {
		h = claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionFalse, Reason: "PortNotActive", Message: "port DOWN"}
	}
	dev := func(name, rdma string) claimstatus.Device {
		return claimstatus.Device{Device: name, Conditions: []claimstatus.Condition{
			{Type: claimstatus.TypeReady, Status: metav1.ConditionTrue, Reason: "Prepared", Message: "CDI device written"}, h},
			Data: &claimstatus.EFAData{RDMADevice: rdma, Request: "efas"}}
	}
	return claimstatus.Claim{Namespace: "ml", Name: "train", UID: uid, Devices: []claimstatus.Device{dev("efa-0000-50-00-0", "rdmap80s0"), dev("efa-0000-4f-00-0", "rdmap79s0")}}
}

// entries are the claim's status.devices as the API holds them, by
// driver/device.
func entries(t *testing.T, client *fake.Clientset) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	c, err := client.ResourceV1().ResourceClaims("ml").Get(context.Background(), "train", metav1.GetOptions{})
	require.NoError(t, err)
	out := map[string]resourceapi.AllocatedDeviceStatus{}
	for _, d := range c.Status.Devices {
		out[d.Driver+"/"+d.Device] = d
	}
	return out
}

func condition(d resourceapi.AllocatedDeviceStatus, typ string) metav1.Condition {
	return ptr.Deref(meta.FindStatusCondition(d.Conditions, typ), metav1.Condition{})
}

// TestWrite: the entries are applied beside the other driver's, which
// stays as it was; a health change turns the Healthy condition with a new
// transition time and keeps Ready's; the same entries again write
// nothing.
func TestWrite(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(allocated())
	w, o, clk := start(t, client)
	w.Set(want(true), allocated().Status.Devices)
	require.Eventually(t, func() bool { return len(entries(t, client)) == 3 }, 10*time.Second, 5*time.Millisecond)
	got := entries(t, client)
	assert.Equal(t, allocated().Status.Devices[0], got["gpu.nvidia.com/gpu-0"], "the other driver's entry untouched")
	efa := got["dra.net/efa-0000-4f-00-0"]
	assert.Equal(t, node, efa.Pool)
	assert.Nil(t, efa.ShareID)
	ready := condition(efa, claimstatus.TypeReady)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, time.Unix(2e9, 0), ready.LastTransitionTime.Time)
	var data claimstatus.EFAData
	require.NoError(t, json.Unmarshal(efa.Data.Raw, &data))
	assert.Equal(t, claimstatus.EFAData{RDMADevice: "rdmap79s0", Request: "efas"}, data)

	clk.SetTime(time.Unix(2e9+60, 0))
	w.Set(want(false), nil)
	require.Eventually(t, func() bool {
		return condition(entries(t, client)["dra.net/efa-0000-50-00-0"], claimstatus.TypeHealthy).Status == metav1.ConditionFalse
	}, 10*time.Second, 5*time.Millisecond)
	down := entries(t, client)["dra.net/efa-0000-50-00-0"]
	assert.Equal(t, "PortNotActive", condition(down, claimstatus.TypeHealthy).Reason)
	assert.Equal(t, time.Unix(2e9+60, 0), condition(down, claimstatus.TypeHealthy).LastTransitionTime.Time, "Healthy turned now")
	assert.Equal(t, time.Unix(2e9, 0), condition(down, claimstatus.TypeReady).LastTransitionTime.Time, "Ready stayed")
	require.Eventually(t, func() bool { return o.get(claimstatus.Written) == 2 }, 10*time.Second, 5*time.Millisecond)

	applies := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	before := applies()
	w.Set(want(false), nil)
	require.Eventually(t, func() bool { return o.get(claimstatus.Written) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, before, applies(), "nothing changed: nothing sent")
	assert.Equal(t, 2, applies(), "two applies in all")
}

// TestRestoredClaimReadsFirst: a claim the Writer does not know the
// entries of (restored at start) is read first, and the transition times
// the API holds are kept; unchanged, nothing is written.
func TestRestoredClaimReadsFirst(t *testing.T) {
	t.Parallel()
	c := allocated()
	old := metav1.NewTime(time.Unix(1.5e9, 0))
	for _, d := range want(true).Devices {
		e := resourceapi.AllocatedDeviceStatus{Driver: "dra.net", Pool: node, Device: d.Device}
		for _, wc := range d.Conditions {
			e.Conditions = append(e.Conditions, metav1.Condition{Type: wc.Type, Status: wc.Status, Reason: wc.Reason, Message: wc.Message, LastTransitionTime: old})
		}
		raw, err := json.Marshal(d.Data)
		require.NoError(t, err)
		e.Data = &runtime.RawExtension{Raw: raw}
		c.Status.Devices = append(c.Status.Devices, e)
	}
	client := fake.NewClientset(c)
	w, o, _ := start(t, client)
	w.Set(want(true), nil)
	require.Eventually(t, func() bool { return o.get(claimstatus.Written) == 1 }, 10*time.Second, 5*time.Millisecond)
	for _, a := range client.Actions() {
		assert.NotEqual(t, "patch", a.GetVerb(), "the entries the API holds are the wanted ones: no write")
	}
	w.Set(want(false), nil)
	require.Eventually(t, func() bool {
		return condition(entries(t, client)["dra.net/efa-0000-4f-00-0"], claimstatus.TypeHealthy).Status == metav1.ConditionFalse
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, old.Time, condition(entries(t, client)["dra.net/efa-0000-4f-00-0"], claimstatus.TypeReady).LastTransitionTime.Time, "Ready's time from the API")
}

// TestOutcomes: a claim that is gone is dropped at once; a refusal for
// want of permission is counted and not retried; a failure that may pass
// is retried until it is written; a server that drops the field stops
// the writes; a forgotten claim is not written.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	t.Run("gone", func(t *testing.T) {
		t.Parallel()
		// Read first (restored), or applied (prepared): the API server
		// answers NotFound either way (an apply of a status subresource
		// creates nothing).
		client := fake.NewClientset()
		client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "train")
		})
		w, o, _ := start(t, client)
		w.Set(want(true), nil)
		require.Eventually(t, func() bool { return o.get(claimstatus.Gone) == 1 }, 10*time.Second, 5*time.Millisecond)
		w.Forget(uid)
		c := want(true)
		c.UID = "another"
		w.Set(c, []resourceapi.AllocatedDeviceStatus{})
		require.Eventually(t, func() bool { return o.get(claimstatus.Gone) == 2 }, 10*time.Second, 5*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, 2, o.get(claimstatus.Gone), "not retried")
	})
	t.Run("made anew", func(t *testing.T) {
		t.Parallel()
		c := allocated()
		c.UID = "another-uid"
		client := fake.NewClientset(c)
		w, o, _ := start(t, client)
		w.Set(want(true), nil)
		require.Eventually(t, func() bool { return o.get(claimstatus.Gone) == 1 }, 10*time.Second, 5*time.Millisecond)
		assert.Len(t, entries(t, client), 1, "nothing written to the new claim")
	})
	t.Run("forbidden", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(allocated())
		client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims/driver"}, "train", errors.New("no"))
		})
		w, o, _ := start(t, client)
		w.Set(want(true), allocated().Status.Devices)
		require.Eventually(t, func() bool { return o.get(claimstatus.Forbidden) == 1 }, 10*time.Second, 5*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, 1, o.get(claimstatus.Forbidden), "not retried")
	})
	t.Run("retried until written", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(allocated())
		var mu sync.Mutex
		fails := 3
		client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			if fails > 0 {
				fails--
				return true, nil, apierrors.NewServiceUnavailable("starting")
			}
			return false, nil, nil
		})
		w, o, _ := start(t, client)
		w.Set(want(true), allocated().Status.Devices)
		require.Eventually(t, func() bool { return o.get(claimstatus.Written) == 1 }, 10*time.Second, 5*time.Millisecond)
		assert.Equal(t, 3, o.get(claimstatus.Retried))
		assert.Len(t, entries(t, client), 3)
	})
	t.Run("retries bounded", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(allocated())
		client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("away")
		})
		w, o, _ := start(t, client)
		w.Set(want(true), allocated().Status.Devices)
		require.Eventually(t, func() bool { return o.get(claimstatus.Failed) == 1 }, 10*time.Second, 5*time.Millisecond)
		assert.Equal(t, claimstatus.MaxRetries+1, o.get(claimstatus.Retried))
	})
	t.Run("dropped by the server", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(allocated())
		client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, allocated(), nil // as stored: no entry of ours
		})
		w, o, _ := start(t, client)
		w.Set(want(true), allocated().Status.Devices)
		require.Eventually(t, func() bool { return o.get(claimstatus.Dropped) == 1 }, 10*time.Second, 5*time.Millisecond)
		w.Set(want(false), nil)
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, 1, o.get(claimstatus.Dropped), "no more writes once the server drops them")
		assert.Zero(t, o.get(claimstatus.Written))
	})
	t.Run("forgotten", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(allocated())
		w := claimstatus.New(claimstatus.Options{Client: client, DriverName: "dra.net", Pool: node})
		w.Set(want(true), nil)
		w.Forget(uid)
		_, ok := w.Wanted(uid)
		assert.False(t, ok)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		w.Run(ctx)
		assert.Empty(t, client.Actions(), "unprepared before the write: nothing read or written")
	})
}

// TestNilWriter: without a client there is no Writer, and its methods do
// nothing.
func TestNilWriter(t *testing.T) {
	t.Parallel()
	w := claimstatus.New(claimstatus.Options{})
	require.Nil(t, w)
	w.Set(want(true), nil)
	w.Forget(uid)
	w.Run(context.Background())
	_, ok := w.Wanted(uid)
	assert.False(t, ok, "a nil Writer knows no claim")
}
