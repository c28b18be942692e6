package driver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// unhealthyNow is each Unhealthy device of the plugin's next health
// report, with its message.
func unhealthyNow(t *testing.T, p *driver.Plugin) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	go func() { _ = p.WatchHealthStatus(ctx, reports) }()
	got := map[string]string{}
	for _, d := range (<-reports).Devices {
		if d.Health == kubeletplugin.HealthStatusUnhealthy {
			got[d.DeviceName] = d.Message
		}
	}
	return got
}

// TestGroupHealthMemberLeaves: a group whose member leaves the scan (gone
// from sysfs, or its uverbs device gone, so it is no longer published)
// is Unhealthy, names the member and is tainted, scan after scan, in
// exclusive and mixed mode, until the member is back. Before, the group
// was built from the new scan alone: it shrank and stayed healthy.
func TestGroupHealthMemberLeaves(t *testing.T) {
	t.Parallel()
	full := edit(t, func(*sysfs.Entry) bool { return true })
	for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
		for _, tc := range []struct {
			name, drop, why string
		}{
			{"gone", "0000:50:00.0", "device gone from sysfs"},
			{"no uverbs device", "0000:50:00.0/infiniband_verbs", "no uverbs device"},
		} {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := &swapFS{}
				s.cur.Store(full)
				w, err := cdi.NewWriter(t.TempDir(), "dra.net")
				require.NoError(t, err)
				p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
					Config: resources.Config{NodeName: node, Groups: mode}, SysfsRoot: s, CDI: w,
					Store: checkpoint.NewStore(t.TempDir()), BootID: bootA,
				})
				require.NoError(t, err)
				rec := &drivertest.Recorder{}
				p.SetPublisher(rec)
				ctx := context.Background()
				_, err = p.Rescan(ctx)
				require.NoError(t, err)
				// The group of rdmap80s0's root, as published.
				topo, err := topology.Scan(s)
				require.NoError(t, err)
				std, _ := topo.StandardAttributes(topo.ByName("rdmap80s0"))
				group := resources.GroupDeviceName(std.PCIeRoot)
				require.Contains(t, rec.LastDevices(), group)
				assert.Empty(t, unhealthyNow(t, p))

				s.cur.Store(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, tc.drop) }))
				want := map[string]string{"efa-0000-50-00-0": tc.why, group: "member efa-0000-50-00-0: " + tc.why}
				for range 2 { // and it stays so at the next scan
					_, _ = p.Rescan(ctx) // an EFA without uverbs device is a scan error too
					assert.Equal(t, want, unhealthyNow(t, p))
					assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "member-unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
						rec.LastDevices()[group].Taints)
				}

				s.cur.Store(full)
				_, err = p.Rescan(ctx)
				require.NoError(t, err)
				assert.Empty(t, unhealthyNow(t, p))
				assert.Empty(t, rec.LastDevices()[group].Taints)
			})
		}
	}
}

// TestLogPrepareUnprepare: at the default verbosity, one line per prepare
// and per unprepare, with the claim, its EFAs by published and RDMA name,
// and the time taken; a failed one says why.
func TestLogPrepareUnprepare(t *testing.T) {
	t.Parallel()
	p := newTestPlugin(t, edit(t, func(*sysfs.Entry) bool { return true }))
	ctx, logged := drivertest.Logger(t)
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	c := claim("c", "a0000000-0000-0000-0000-0000000000d1", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	bad := claim("bad", "a0000000-0000-0000-0000-0000000000d2", "efa-0000-4f-00-0")
	res, err = p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{bad})
	require.NoError(t, err)
	require.Error(t, res[bad.UID].Err)
	_, err = p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "c"}, UID: c.UID}})
	require.NoError(t, err)

	log := logged()
	prepared := drivertest.Entries(log, "Prepared claim")
	require.Len(t, prepared, 1)
	m := drivertest.KV(prepared[0])
	assert.Equal(t, "default/c", fmt.Sprint(m["claim"]))
	assert.Equal(t, c.UID, m["uid"])
	assert.Equal(t, []string{"efa-0000-4f-00-0=rdmap79s0", "efa-0000-50-00-0=rdmap80s0"}, m["devices"])
	assert.IsType(t, time.Duration(0), m["duration"])

	failed := drivertest.Entries(log, "Prepare failed")
	require.Len(t, failed, 1)
	assert.ErrorContains(t, failed[0].Err, "already prepared for claim "+c.Namespace+"/"+c.Name+" ("+string(c.UID)+")")
	assert.Equal(t, "default/bad", fmt.Sprint(drivertest.KV(failed[0])["claim"]))

	unprepared := drivertest.Entries(log, "Unprepared claim")
	require.Len(t, unprepared, 1)
	m = drivertest.KV(unprepared[0])
	assert.Equal(t, c.UID, m["uid"])
	assert.Equal(t, []string{"efa-0000-4f-00-0=rdmap79s0", "efa-0000-50-00-0=rdmap80s0"}, m["devices"])
	assert.IsType(t, time.Duration(0), m["duration"])
}

// TestLogHealthChangesOnce: a health change is logged once, naming why
// and the RDMA device, and not again at a scan that changes nothing
// (driver/publishing's TestLogPublishSaysWhat tests the publishes' lines).
func TestLogHealthChangesOnce(t *testing.T) {
	t.Parallel()
	full := edit(t, func(*sysfs.Entry) bool { return true })
	s := &swapFS{}
	s.cur.Store(full)
	p := newTestPlugin(t, s)
	p.SetPublisher(&drivertest.Recorder{})
	ctx, logged := drivertest.Logger(t)
	scan := func(fs *sysfs.MemFS) {
		s.cur.Store(fs)
		_, _ = p.Rescan(ctx)
	}
	scan(full)
	scan(portDown(t, "50"))
	scan(portDown(t, "50")) // nothing changed: no line
	scan(full)
	scan(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, "0000:4f:00.0") }))
	// A damaged file: the EFA at 51:00.0 is left out of the publish,
	// which is no health change.
	scan(edit(t, func(e *sysfs.Entry) bool {
		if strings.HasSuffix(e.Path, "0000:51:00.0/infiniband/rdmap81s0/ports/1/rate") {
			e.Data = []byte("fast\n")
		}
		return true
	}))

	unhealthy := drivertest.Entries(logged(), "EFA unhealthy")
	require.Len(t, unhealthy, 2, "port DOWN once, then gone from sysfs")
	assert.Equal(t, "port DOWN", drivertest.KV(unhealthy[0])["why"])
	assert.Equal(t, "rdmap80s0", drivertest.KV(unhealthy[0])["rdmaDevice"])
	assert.Equal(t, "device gone from sysfs", drivertest.KV(unhealthy[1])["why"])
	assert.Len(t, drivertest.Entries(logged(), "EFA healthy again"), 2)
}
