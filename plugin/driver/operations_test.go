package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/rdmans"
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
				rec := &recorder{}
				p.SetPublisher(rec)
				ctx := context.Background()
				_, err = p.Rescan(ctx)
				require.NoError(t, err)
				// The group of rdmap80s0's root, as published.
				topo, err := topology.Scan(s)
				require.NoError(t, err)
				std, _ := topo.StandardAttributes(topo.ByName("rdmap80s0"))
				group := resources.GroupDeviceName(std.PCIeRoot)
				require.Contains(t, lastDevices(rec), group)
				assert.Empty(t, unhealthyNow(t, p))

				s.cur.Store(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, tc.drop) }))
				want := map[string]string{"efa-0000-50-00-0": tc.why, group: "member efa-0000-50-00-0: " + tc.why}
				for range 2 { // and it stays so at the next scan
					_, _ = p.Rescan(ctx) // an EFA without uverbs device is a scan error too
					assert.Equal(t, want, unhealthyNow(t, p))
					assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "member-unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
						lastDevices(rec)[group].Taints)
				}

				s.cur.Store(full)
				_, err = p.Rescan(ctx)
				require.NoError(t, err)
				assert.Empty(t, unhealthyNow(t, p))
				assert.Empty(t, lastDevices(rec)[group].Taints)
			})
		}
	}
}

// testLogger records what is logged at the default verbosity.
func testLogger(t *testing.T) (context.Context, func() []ktesting.LogEntry) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func() []ktesting.LogEntry {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().Data()
	}
}

// kv is a log entry's key/value pairs as a map.
func kv(e ktesting.LogEntry) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
		out[fmt.Sprint(e.ParameterKVList[i])] = e.ParameterKVList[i+1]
	}
	return out
}

func entries(log []ktesting.LogEntry, msg string) []ktesting.LogEntry {
	var out []ktesting.LogEntry
	for _, e := range log {
		if e.Message == msg {
			out = append(out, e)
		}
	}
	return out
}

// TestLogPrepareUnprepare: at the default verbosity, one line per prepare
// and per unprepare, with the claim, its EFAs by published and RDMA name,
// and the time taken; a failed one says why.
func TestLogPrepareUnprepare(t *testing.T) {
	t.Parallel()
	p := newTestPlugin(t, edit(t, func(*sysfs.Entry) bool { return true }))
	ctx, logged := testLogger(t)
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
	prepared := entries(log, "Prepared claim")
	require.Len(t, prepared, 1)
	m := kv(prepared[0])
	assert.Equal(t, "default/c", fmt.Sprint(m["claim"]))
	assert.Equal(t, c.UID, m["uid"])
	assert.Equal(t, []string{"efa-0000-4f-00-0=rdmap79s0", "efa-0000-50-00-0=rdmap80s0"}, m["devices"])
	assert.IsType(t, time.Duration(0), m["duration"])

	failed := entries(log, "Prepare failed")
	require.Len(t, failed, 1)
	assert.ErrorContains(t, failed[0].Err, "already prepared for claim "+c.Namespace+"/"+c.Name+" ("+string(c.UID)+")")
	assert.Equal(t, "default/bad", fmt.Sprint(kv(failed[0])["claim"]))

	unprepared := entries(log, "Unprepared claim")
	require.Len(t, unprepared, 1)
	m = kv(unprepared[0])
	assert.Equal(t, c.UID, m["uid"])
	assert.Equal(t, []string{"efa-0000-4f-00-0=rdmap79s0", "efa-0000-50-00-0=rdmap80s0"}, m["devices"])
	assert.IsType(t, time.Duration(0), m["duration"])
}

// TestLogPublishSaysWhat: every publish says what changed (devices tainted,
// untainted, removed, added), and one caused by a scan with errors names
// them; nothing else is logged at each scan, and a health change is
// logged once.
func TestLogPublishSaysWhat(t *testing.T) {
	t.Parallel()
	full := edit(t, func(*sysfs.Entry) bool { return true })
	s := &swapFS{}
	s.cur.Store(full)
	p := newTestPlugin(t, s)
	p.SetPublisher(&recorder{})
	ctx, logged := testLogger(t)
	scan := func(fs *sysfs.MemFS) {
		s.cur.Store(fs)
		_, _ = p.Rescan(ctx)
	}
	scan(full)
	scan(portDown(t, "50"))
	scan(portDown(t, "50")) // nothing changed: no line
	scan(full)
	scan(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, "0000:4f:00.0") }))
	// A damaged file: the EFA at 51:00.0 is left out, and the scan's
	// error is named by the publish it causes.
	scan(edit(t, func(e *sysfs.Entry) bool {
		if strings.HasSuffix(e.Path, "0000:51:00.0/infiniband/rdmap81s0/ports/1/rate") {
			e.Data = []byte("fast\n")
		}
		return true
	}))

	var got []map[string]any
	for _, e := range entries(logged(), "Published") {
		got = append(got, kv(e))
	}
	require.Len(t, got, 5)
	assert.Equal(t, map[string]any{"devices": 32, "first": true}, got[0])
	assert.Equal(t, map[string]any{"devices": 32, "tainted": []string{"efa-0000-50-00-0=port-not-active"}}, got[1])
	assert.Equal(t, map[string]any{"devices": 32, "untainted": []string{"efa-0000-50-00-0"}}, got[2])
	assert.Equal(t, map[string]any{"devices": 31, "removed": []string{"efa-0000-4f-00-0"}}, got[3])
	assert.Equal(t, []string{"efa-0000-4f-00-0"}, got[4]["added"])
	assert.Contains(t, got[4]["scanErrors"], "0000:51:00.0")
	unhealthy := entries(logged(), "EFA unhealthy")
	require.Len(t, unhealthy, 2, "port DOWN once, then gone from sysfs")
	assert.Equal(t, "port DOWN", kv(unhealthy[0])["why"])
	assert.Equal(t, "rdmap80s0", kv(unhealthy[0])["rdmaDevice"])
	assert.Equal(t, "device gone from sysfs", kv(unhealthy[1])["why"])
	assert.Len(t, entries(logged(), "EFA healthy again"), 2)
}

// TestLogNetnsUnknownOnce: an RDMA namespace mode the kernel cannot tell
// is logged once, not at every scan, and again only when it changes.
func TestLogNetnsUnknownOnce(t *testing.T) {
	t.Parallel()
	ctx, logged := testLogger(t)
	live := &switchLive{err: errors.New("netlink: protocol not supported")}
	check := owners.Netns(live)
	for range 5 {
		v, err := check(ctx)
		require.NoError(t, err)
		assert.Empty(t, v.Reason)
	}
	live.err = nil
	_, _ = check(ctx)
	live.err = errors.New("netlink: permission denied")
	_, _ = check(ctx)
	_, _ = check(ctx)
	var msgs []string
	for _, e := range logged() {
		msgs = append(msgs, e.Message)
	}
	assert.Equal(t, []string{"RDMA namespace mode unknown; taking the kernel's default", "RDMA namespace mode known again",
		"RDMA namespace mode unknown; taking the kernel's default"}, msgs)
}

type switchLive struct{ err error }

func (s *switchLive) RDMANetnsMode() (rdmans.Mode, error) { return rdmans.Shared, s.err }

// TestSliceRepair: a slice of the node deleted by someone else (a
// restarting kubelet deletes them all) or changed by someone else is
// published again within seconds, not after the controller's default 30 s
// sync delay, and the log says so once per repair.
func TestSliceRepair(t *testing.T) {
	t.Parallel()
	ctx, logged := testLogger(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	pub := &publishing.Slices{Ctx: ctx, Client: client, DriverName: "dra.net", NodeName: node}
	defer pub.Stop()
	go pub.Watch(ctx, func() {})()
	topoRes := publishedP5(t)
	require.NoError(t, pub.PublishResources(ctx, topoRes))
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
	require.Eventually(t, func() bool { return len(entries(logged(), repairMsg)) == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Len(t, kv(entries(logged(), repairMsg)[0])["deleted"], 1)

	// Changed: a device taken out of the slice.
	sl := slices()[0]
	sl.Spec.Devices = sl.Spec.Devices[1:]
	start = time.Now()
	_, err := client.ResourceV1().ResourceSlices().Update(ctx, &sl, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { l := slices(); return len(l) == 1 && len(l[0].Spec.Devices) == 32 }, 5*time.Second, 10*time.Millisecond,
		"repaired within 5 s")
	t.Logf("changed slice repaired after %v", time.Since(start))
	require.Eventually(t, func() bool { return len(entries(logged(), repairMsg)) == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{sl.Name}, kv(entries(logged(), repairMsg)[1])["changed"])
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, entries(logged(), repairMsg), 2, "once per repair")
}

const repairMsg = "Published again the ResourceSlices someone else deleted or changed"

// publishedP5 is what the plugin publishes for the p5 fixture.
func publishedP5(t *testing.T) resourceslice.DriverResources {
	t.Helper()
	p := newTestPlugin(t, edit(t, func(*sysfs.Entry) bool { return true }))
	rec := &recorder{}
	p.SetPublisher(rec)
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	return rec.calls[0]
}
