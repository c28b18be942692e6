package publishing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// publishedP5 is what the plugin publishes for the p5 fixture.
func publishedP5(t *testing.T) resourceslice.DriverResources {
	t.Helper()
	cfg := resources.Config{NodeName: node}
	res, _ := snapshot(t, full(t), cfg, nil, nil).Published(cfg, resources.TaintSupport{})
	require.NotNil(t, res)
	return *res
}

const repairMsg = "Published again the ResourceSlices someone else deleted or changed"

// TestSliceRepair: a slice of the node deleted by someone else (a
// restarting kubelet deletes them all) or changed by someone else is
// published again within seconds, not after the controller's default 30 s
// sync delay, and the log says so once per repair.
func TestSliceRepair(t *testing.T) {
	t.Parallel()
	ctx, logged := drivertest.Logger(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	pub := &publishing.Slices{Ctx: ctx, Client: client, DriverName: "dra.net", NodeName: node}
	defer pub.Stop()
	go pub.Watch(ctx, func() {})()
	require.NoError(t, pub.PublishResources(ctx, publishedP5(t)))
	slices := func() []resourceapi.ResourceSlice {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		return l.Items
	}
	require.Eventually(t, func() bool { return len(slices()) == 1 }, 10*time.Second, 10*time.Millisecond)

	// Deleted, as the kubelet does when it starts.
	start := time.Now()
	require.NoError(t, client.ResourceV1().ResourceSlices().Delete(ctx, slices()[0].Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { l := slices(); return len(l) == 1 && len(l[0].Spec.Devices) == 32 }, 5*time.Second, 10*time.Millisecond,
		"republished within 5 s")
	t.Logf("deleted slice republished after %v", time.Since(start))
	require.Eventually(t, func() bool { return len(drivertest.Entries(logged(), repairMsg)) == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Len(t, drivertest.KV(drivertest.Entries(logged(), repairMsg)[0])["deleted"], 1)

	// Changed: a device taken out of the slice.
	sl := slices()[0]
	sl.Spec.Devices = sl.Spec.Devices[1:]
	start = time.Now()
	_, err := client.ResourceV1().ResourceSlices().Update(ctx, &sl, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { l := slices(); return len(l) == 1 && len(l[0].Spec.Devices) == 32 }, 5*time.Second, 10*time.Millisecond,
		"repaired within 5 s")
	t.Logf("changed slice repaired after %v", time.Since(start))
	require.Eventually(t, func() bool { return len(drivertest.Entries(logged(), repairMsg)) == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{sl.Name}, drivertest.KV(drivertest.Entries(logged(), repairMsg)[1])["changed"])
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, drivertest.Entries(logged(), repairMsg), 2, "once per repair")
}

// TestWithdrawKeepsForeignSlices: another dra.net publisher's slice
// appearing on the node after efakit published is told at once by the
// watch (well before the controller's sync would delete it), and
// Withdraw then deletes efakit's own slices and nobody else's.
func TestWithdrawKeepsForeignSlices(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	// The helper's sync delay: a foreign slice is deleted by the
	// controller only after it.
	delay := resourceslice.DefaultSyncDelay
	pub := &publishing.Slices{Ctx: ctx, Client: client, DriverName: "dra.net", NodeName: node, SyncDelay: delay}
	defer pub.Stop()
	foreignSeen := make(chan struct{}, 100)
	go pub.Watch(ctx, func() { foreignSeen <- struct{}{} })()
	require.NoError(t, pub.PublishResources(ctx, publishedP5(t)))
	list := func() []resourceapi.ResourceSlice {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		return l.Items
	}
	require.Eventually(t, func() bool { return len(list()) == 1 }, 10*time.Second, 20*time.Millisecond)
	select {
	case <-foreignSeen:
		t.Fatal("efakit's own slice taken for a foreign one")
	default:
	}

	nodeName := node
	foreign := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "dra.net", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: "eth", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "eth0"}},
	}}
	_, err := client.ResourceV1().ResourceSlices().Create(ctx, foreign, metav1.CreateOptions{})
	require.NoError(t, err)
	select {
	case <-foreignSeen:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not tell of the foreign slice")
	}
	require.NoError(t, pub.Withdraw(ctx))
	l := list()
	require.Len(t, l, 1, "efakit's slice withdrawn, the other kept")
	assert.Equal(t, "other", l[0].Name)
}
