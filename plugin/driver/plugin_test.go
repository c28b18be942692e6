package driver_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// swapFS is a sysfs whose content a test replaces between scans, as
// hot-unplug or a driver unbind changes a live /sys.
type swapFS struct{ cur atomic.Pointer[sysfs.MemFS] }

func (s *swapFS) Open(n string) (fs.File, error)      { return s.cur.Load().Open(n) }
func (s *swapFS) ReadLink(n string) (string, error)   { return s.cur.Load().ReadLink(n) }
func (s *swapFS) Lstat(n string) (fs.FileInfo, error) { return s.cur.Load().Lstat(n) }

// edit returns the p5 fixture with f applied to each entry (false drops it).
func edit(t testing.TB, f func(e *sysfs.Entry) bool) *sysfs.MemFS { return drivertest.Edit(t, p5, f) }

func newTestPlugin(t *testing.T, fsys fs.ReadLinkFS, with ...func(*driver.PluginOptions)) *driver.Plugin {
	t.Helper()
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	o := driver.PluginOptions{
		Config: resources.Config{NodeName: node}, SysfsRoot: fsys, CDI: w,
		Store: checkpoint.NewStore(t.TempDir()), BootID: bootA,
	}
	for _, f := range with {
		f(&o)
	}
	p, err := driver.NewPlugin(context.Background(), o)
	require.NoError(t, err)
	return p
}

func TestRescanPublishesOnlyChanges(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p := newTestPlugin(t, s)
	rec := &drivertest.Recorder{}
	p.SetPublisher(rec)
	ctx := context.Background()
	for range 3 {
		_, err := p.Rescan(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, rec.Count(), "nothing changed: published once")

	// The EFA at 4f:00.0 is unplugged: published again without it.
	s.cur.Store(edit(t, func(e *sysfs.Entry) bool {
		return !strings.Contains(e.Path, "0000:4f:00.0")
	}))
	published, err := p.Rescan(ctx)
	require.NoError(t, err)
	assert.True(t, published)
	require.Equal(t, 2, rec.Count())
	assert.Len(t, rec.Calls()[1].Pools[node].Slices[0].Devices, 31)
	assert.Equal(t, float64(2), testutilValue(t, p))
}

func testutilValue(t *testing.T, p *driver.Plugin) float64 {
	t.Helper()
	mfs, err := p.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "efakit_plugin_publish_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no efakit_plugin_publish_total")
	return 0
}

// TestHealth: a full report first, then an EFA whose port leaves ACTIVE,
// one whose uverbs device is gone and one that disappears are reported
// Unhealthy.
func TestHealth(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Health.Interval = 20 * time.Millisecond })
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go p.Run(ctx, time.Hour) // the health checks' scans
	go func() { done <- p.WatchHealthStatus(ctx, reports) }()

	first := <-reports
	require.Len(t, first.Devices, 32)
	for _, d := range first.Devices {
		assert.Equal(t, kubeletplugin.HealthStatusHealthy, d.Health, d.DeviceName)
		assert.Equal(t, node, d.PoolName)
	}
	s.cur.Store(edit(t, func(e *sysfs.Entry) bool {
		switch {
		case strings.HasSuffix(e.Path, "0000:50:00.0/infiniband/rdmap80s0/ports/1/state"):
			e.Data = []byte("1: DOWN\n")
		case strings.Contains(e.Path, "0000:51:00.0/infiniband_verbs"):
			return false
		case strings.Contains(e.Path, "0000:52:00.0"):
			return false
		}
		return true
	}))
	want := map[string]string{"efa-0000-50-00-0": "port DOWN", "efa-0000-51-00-0": "no uverbs device", "efa-0000-52-00-0": "device gone from sysfs"}
	deadline := time.After(10 * time.Second)
	for {
		var r kubeletplugin.DeviceHealthReport
		select {
		case r = <-reports:
		case <-deadline:
			t.Fatal("no report with the unhealthy devices")
		}
		got := map[string]string{}
		for _, d := range r.Devices {
			if d.Health == kubeletplugin.HealthStatusUnhealthy {
				got[d.DeviceName] = d.Message
			}
		}
		if len(got) == len(want) {
			assert.Equal(t, want, got)
			break
		}
	}
	cancel()
	require.NoError(t, <-done)
}

// TestPrepareGroup: a group gives the container every member's uverbs node,
// as if they had been claimed one by one; a member of a prepared group
// cannot be prepared for another claim.
func TestPrepareGroup(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, "dra.net")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node, Groups: resources.GroupsMixed},
		SysfsRoot: root, CDI: w, Store: checkpoint.NewStore(t.TempDir()), BootID: bootA})
	require.NoError(t, err)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)

	g := claim("group", "88888888-8888-8888-8888-888888888888", "efa-group-pci0000-44")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{g})
	require.NoError(t, err)
	r := res[g.UID]
	require.NoError(t, r.Err)
	require.Len(t, r.Devices, 1, "the kubelet sees the group, not its members")
	assert.Equal(t, "efa-group-pci0000-44", r.Devices[0].DeviceName)
	spec, err := w.Load(string(g.UID))
	require.NoError(t, err)
	require.Len(t, spec.Devices, 1)
	var nodes []string
	for _, dn := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, dn.Path)
	}
	assert.Equal(t, []string{"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/uverbs2", "/dev/infiniband/uverbs3"}, nodes)
	assert.Empty(t, spec.Devices[0].ContainerEdits.Env)

	member := claim("member", "99999999-9999-9999-9999-999999999999", "efa-0000-50-00-0")
	res, err = p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{member})
	require.NoError(t, err)
	assert.ErrorContains(t, res[member.UID].Err, "already prepared for claim "+g.Namespace+"/"+g.Name+" ("+string(g.UID)+")")
}

// TestDroppedCountersStop: when the API server drops the shared counters
// (no DRAPartitionableDevices), the plugin stops with a clear message
// instead of publishing groups that could be allocated twice.
func TestDroppedCountersStop(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	var stopped error
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{Config: resources.Config{NodeName: node, Groups: resources.GroupsMixed},
		SysfsRoot: root, CDI: w, Store: checkpoint.NewStore(t.TempDir()), BootID: bootA,
		Hooks: driver.Hooks{Stop: func(err error) { stopped = err }}})
	require.NoError(t, err)
	want := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: []resourceapi.CounterSet{{Name: "efas-pci0000-44"}}}}
	p.HandleError(context.Background(), &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: want, ActualSlice: &resourceapi.ResourceSlice{}}, "publishing")
	require.Error(t, stopped)
	assert.Contains(t, stopped.Error(), "needs DRAPartitionableDevices")
	assert.Contains(t, stopped.Error(), "--groups=none or exclusive")

	// Other errors the helper calls recoverable do not stop it.
	stopped = nil
	p.HandleError(context.Background(), fmt.Errorf("conflict: %w", kubeletplugin.ErrRecoverable), "publishing")
	assert.NoError(t, stopped)
}
