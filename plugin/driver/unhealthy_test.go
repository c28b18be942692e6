package driver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// portDown is the p5 fixture with the EFA at bus:00.0's port DOWN.
func portDown(t *testing.T, bus string) *sysfs.MemFS {
	return edit(t, func(e *sysfs.Entry) bool {
		if strings.Contains(e.Path, "0000:"+bus+":00.0/infiniband/") && strings.HasSuffix(e.Path, "/ports/1/state") {
			e.Data = []byte("1: DOWN\n")
		}
		return true
	})
}

// TestUnhealthyTainted: an unhealthy EFA is published with a NoSchedule
// taint, so the scheduler gives it to no new claim, and loses it when it
// is healthy again; a claim allocated already is still prepared. Where the
// API server drops taints, the device is withheld from the slice instead.
func TestUnhealthyTainted(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p := newTestPlugin(t, s)
	rec := &drivertest.Recorder{}
	p.SetPublisher(rec)
	ctx := context.Background()
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	assert.Empty(t, rec.LastDevices()["efa-0000-50-00-0"].Taints)

	s.cur.Store(portDown(t, "50"))
	published, err := p.Rescan(ctx)
	require.NoError(t, err)
	require.True(t, published)
	devs := rec.LastDevices()
	require.Len(t, devs, 32)
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "port-not-active", Effect: resourceapi.DeviceTaintEffectNoSchedule}}, devs["efa-0000-50-00-0"].Taints)
	assert.Empty(t, devs["efa-0000-4f-00-0"].Taints)
	assert.Equal(t, 1.0, gaugeValue(t, p, "efakit_plugin_unhealthy_devices", "taint"))

	// Allocated before it went down: still prepared.
	c := claim("c", "e0000000-0000-0000-0000-000000000001", "efa-0000-50-00-0")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)

	// The API server drops taints: the device is withheld.
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "x", Taints: devs["efa-0000-50-00-0"].Taints}}}}
	actual := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "x"}}}}
	p.HandleError(ctx, &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: desired, ActualSlice: actual}, "publish")
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	devs = rec.LastDevices()
	assert.Len(t, devs, 31)
	assert.NotContains(t, devs, "efa-0000-50-00-0")
	assert.Equal(t, 1.0, gaugeValue(t, p, "efakit_plugin_unhealthy_devices", "withhold"))
	assert.Equal(t, 0.0, gaugeValue(t, p, "efakit_plugin_unhealthy_devices", "taint"))

	// Healthy again: back in the slice.
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	assert.Len(t, rec.LastDevices(), 32)
}

// TestUnhealthyGroup: a group with an unhealthy member is tainted and
// reported Unhealthy, naming the member.
func TestUnhealthyGroup(t *testing.T) {
	t.Parallel()
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
		Config: resources.Config{NodeName: node, Groups: resources.GroupsExclusive}, SysfsRoot: portDown(t, "60"), CDI: w,
		Store: checkpoint.NewStore(t.TempDir()), BootID: bootA,
	})
	require.NoError(t, err)
	rec := &drivertest.Recorder{}
	p.SetPublisher(rec)
	_, err = p.Rescan(context.Background())
	require.NoError(t, err)
	devs := rec.LastDevices()
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "member-unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}, devs["efa-group-pci0000-55"].Taints)
	assert.Empty(t, devs["efa-group-pci0000-44"].Taints)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport, 1)
	go func() { _ = p.WatchHealthStatus(ctx, reports) }()
	r := <-reports
	got := map[string]string{}
	for _, d := range r.Devices {
		if d.Health == kubeletplugin.HealthStatusUnhealthy {
			got[d.DeviceName] = d.Message
		}
	}
	assert.Equal(t, map[string]string{"efa-0000-60-00-0": "port DOWN", "efa-group-pci0000-55": "member efa-0000-60-00-0: port DOWN"}, got)
}

func gaugeValue(t *testing.T, p *driver.Plugin, name, label string) float64 {
	t.Helper()
	mfs, err := p.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func sliceCount(n *kubeletNode) int {
	l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(n.t, err)
	return len(l.Items)
}

// TestStandAsideFollowsNode: the owner checks read the Node from a watch,
// so the device plugin leaving the node makes the plugin publish without
// waiting for its periodic rescan, and coming back withdraws the slices.
// The adapter's wiring (run.go: the watch's change asks for a scan); the
// owner check itself is driver/owners' to test.
func TestStandAsideFollowsNode(t *testing.T) {
	c := claim("c", "f0000000-0000-0000-0000-000000000006", "efa-0000-4f-00-0")
	n := newNode(t, p5, c)
	n.setEFACapacity("32")
	n.start()
	defer n.stop()
	assert.Contains(t, n.prepare(c)[string(c.UID)].Error, "vpc.amazonaws.com/efa")
	n.setEFACapacity("")
	require.Eventually(t, func() bool { return sliceCount(n) == 1 }, 10*time.Second, 20*time.Millisecond, "published with no rescan asked for")
	n.setEFACapacity("32")
	require.Eventually(t, func() bool { return sliceCount(n) == 0 }, 10*time.Second, 20*time.Millisecond, "withdrawn with no rescan asked for")
}

// TestStandAsideFollowsSlices: when another dra.net publisher appears
// after the plugin published, the plugin stands aside at once, deleting
// its own slices and nobody else's. The adapter's wiring (run.go: the
// slice watch's foreign slice asks for a scan, whose owner check stands
// aside); driver/publishing's TestWithdrawKeepsForeignSlices tests the
// watch and the withdrawal themselves.
func TestStandAsideFollowsSlices(t *testing.T) {
	c := claim("c", "f0000000-0000-0000-0000-000000000005", "efa-0000-4f-00-0")
	n := newNode(t, p5, c)
	n.start()
	defer n.stop()
	require.Eventually(t, func() bool { return sliceCount(n) == 1 }, 10*time.Second, 20*time.Millisecond)
	nodeName := node
	foreign := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "dra.net", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: "eth", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "eth0"}},
	}}
	_, err := n.client.ResourceV1().ResourceSlices().Create(context.Background(), foreign, metav1.CreateOptions{})
	require.NoError(t, err)
	// No rescan asked for: the watch on the node's slices notices it, well
	// before the controller's sync delay would have deleted it.
	require.Eventually(t, func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && l.Items[0].Name == "other"
	}, 5*time.Second, 20*time.Millisecond, "efakit's slice withdrawn, the other kept")
	assert.Contains(t, n.prepare(c)[string(c.UID)].Error, "another dra.net driver")
}
