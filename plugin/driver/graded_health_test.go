package driver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// networkCounters are the retransmission and remote counters (Nitro v4
// and later) that the p5 capture lacks.
var networkCounters = []string{"retrans_bytes", "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events"}

// withCounters is the p5 capture with the network counters added to every
// EFA's port, each 0 but those set: by PCI bus, counter file name.
func withCounters(t testing.TB, set map[string]map[string]uint64) *sysfs.MemFS {
	t.Helper()
	var added []sysfs.Entry
	m := edit(t, func(e *sysfs.Entry) bool {
		dir, file := filepath.Split(e.Path)
		if !strings.HasSuffix(dir, "/ports/1/hw_counters/") && !strings.HasSuffix(dir, "/hw_counters/") {
			return true
		}
		bus := busOf(e.Path)
		if v, ok := set[bus][file]; ok {
			e.Data = fmt.Appendf(nil, "%d\n", v)
		}
		if file == "tx_pkts" {
			for _, c := range networkCounters {
				added = append(added, sysfs.Entry{Path: dir + c, Kind: sysfs.KindFile, Data: fmt.Appendf(nil, "%d\n", set[bus][c])})
			}
		}
		return true
	})
	all := append(m.Entries(), added...)
	out, err := sysfs.NewMemFS(all)
	require.NoError(t, err)
	return out
}

// busOf is the PCI bus of the EFA a path is under ("4f" for
// .../0000:4f:00.0/infiniband/...).
func busOf(path string) string {
	i := strings.Index(path, "/infiniband/")
	if i < 0 {
		return ""
	}
	fn := filepath.Base(path[:i]) // 0000:4f:00.0
	if len(fn) < 7 {
		return ""
	}
	return fn[5:7]
}

// TestGradedHealth: through the plugin, an EFA whose retransmit timeouts
// climb past the limit within the window turns Degraded: a taint of effect
// None keyed dra.net/degraded, still allocatable; its claim's Healthy
// condition False with the rule as reason; the kubelet's report Unhealthy
// with the grade in its message; an EFADegraded Event; the health metric.
// One whose admin queue stopped answering (no_completion_cmds) turns
// Unhealthy with the configured effect, here NoExecute. When the counters
// stop for a window, both are healthy again.
func TestGradedHealth(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(withCounters(t, nil))
	c := claim("g", "c3000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	client := fake.NewClientset(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, clocktesting.NewFakeClock(time.Now()))
	defer rec.Stop()
	dir := t.TempDir()
	w, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "dra.net")
	require.NoError(t, err)
	policy := health.DefaultPolicy()
	policy.Window = 2 * time.Second
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{
		Config:    resources.Config{NodeName: node, UnhealthyEffect: resourceapi.DeviceTaintEffectNoExecute},
		SysfsRoot: s, CDI: w, Store: checkpoint.NewStore(filepath.Join(dir, "data")), BootID: bootA,
		StatusClient: client, Hooks: driver.Hooks{Events: rec}, Health: driver.HealthOptions{Policy: policy},
	})
	require.NoError(t, err)
	statusDone := make(chan struct{})
	go func() { p.StatusWriter().Run(ctx); close(statusDone) }()
	defer func() { cancel(); <-statusDone }()
	pub := &drivertest.Recorder{}
	p.SetPublisher(pub)
	// The first scan finds the EFAs, the second reads their counters: the
	// baseline.
	for range 2 {
		_, err = p.Rescan(ctx)
		require.NoError(t, err)
	}
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	drivertest.WaitEntries(t, client, c, 1)

	// 75 retransmit timeouts on 4f (limit 60), an admin command without
	// completion on 50.
	s.cur.Store(withCounters(t, map[string]map[string]uint64{
		"4f": {"retrans_timeout_events": 75},
		"50": {"no_completion_cmds": 1},
	}))
	_, err = p.Rescan(ctx)
	require.NoError(t, err)

	devs := pub.LastDevices()
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/degraded", Value: "retransmit-timeouts", Effect: resourceapi.DeviceTaintEffectNone}},
		devs["efa-0000-4f-00-0"].Taints)
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "admin-timeouts", Effect: resourceapi.DeviceTaintEffectNoExecute}},
		devs["efa-0000-50-00-0"].Taints)
	assert.Empty(t, devs["efa-0000-51-00-0"].Taints)

	const degradedMsg = "degraded: 75 retransmit timeouts in 2s (limit 60)"
	healthy := func() string {
		h, _ := drivertest.EntryCondition(drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"], "Healthy")
		return string(h.Status) + " " + h.Reason + " " + h.Message
	}
	require.Eventually(t, func() bool { return healthy() == "False RetransmitTimeouts "+degradedMsg }, 10*time.Second, 10*time.Millisecond, "Healthy: %s", healthy())

	reports := make(chan kubeletplugin.DeviceHealthReport, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- p.WatchHealthStatus(watchCtx, reports) }()
	byName := map[string]kubeletplugin.DeviceHealth{}
	for _, d := range (<-reports).Devices {
		byName[d.DeviceName] = d
	}
	stopWatch()
	require.NoError(t, <-watchDone)
	assert.Equal(t, kubeletplugin.HealthStatusUnhealthy, byName["efa-0000-4f-00-0"].Health)
	assert.Equal(t, degradedMsg, byName["efa-0000-4f-00-0"].Message)
	assert.Equal(t, kubeletplugin.HealthStatusUnhealthy, byName["efa-0000-50-00-0"].Health)
	assert.Equal(t, "1 admin commands without completion in 2s (limit 1)", byName["efa-0000-50-00-0"].Message)
	assert.Equal(t, kubeletplugin.HealthStatusHealthy, byName["efa-0000-51-00-0"].Health)

	var evs []corev1.Event
	require.Eventually(t, func() bool {
		l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		evs = l.Items
		return len(evs) == 2
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "EFA efa-0000-4f-00-0 (rdmap79s0) is degraded: 75 retransmit timeouts in 2s (limit 60); still allocated, marked with a taint of effect None",
		byReason(evs, events.ReasonDegraded).Message)
	assert.Contains(t, byReason(evs, events.ReasonUnhealthy).Message, "EFA efa-0000-50-00-0 (rdmap80s0) is unhealthy: 1 admin commands")

	ss := drivertest.Gather(t, p.Registry())
	assert.Len(t, drivertest.Find(ss, "efakit_plugin_device_health", map[string]string{"device": "efa-0000-4f-00-0", "grade": "Degraded", "reason": "retransmit-timeouts"}), 1)
	assert.Len(t, drivertest.Find(ss, "efakit_plugin_device_health", map[string]string{"device": "efa-0000-50-00-0", "grade": "Unhealthy", "reason": "admin-timeouts"}), 1)
	assert.Len(t, drivertest.Find(ss, "efakit_plugin_device_health", nil), 2, "healthy devices have no series")
	assert.Equal(t, 1.0, drivertest.Find(ss, "efakit_plugin_degraded_devices", map[string]string{"action": "taint"})[0].Value)
	assert.Equal(t, 1.0, drivertest.Find(ss, "efakit_plugin_unhealthy_devices", map[string]string{"action": "taint"})[0].Value)

	// The counters stand still: once the window no longer holds their
	// advance, both are healthy again.
	require.Eventually(t, func() bool {
		_, err := p.Rescan(ctx)
		require.NoError(t, err)
		devs := pub.LastDevices()
		return len(devs["efa-0000-4f-00-0"].Taints) == 0 && len(devs["efa-0000-50-00-0"].Taints) == 0
	}, 10*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return healthy() == "True Healthy port ACTIVE, uverbs device present, bound to efa" },
		10*time.Second, 10*time.Millisecond, "Healthy: %s", healthy())
	assert.Empty(t, drivertest.Find(drivertest.Gather(t, p.Registry()), "efakit_plugin_device_health", nil))
}

// TestPortFlapsDegrade: a port seen changing state three times within the
// window is Degraded while it is up (and Unhealthy while it is down), so
// a flapping link stays marked between its downs.
func TestPortFlapsDegrade(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	up, down := withCounters(t, nil), portDown(t, "4f")
	s.cur.Store(up)
	p := newTestPlugin(t, s)
	pub := &drivertest.Recorder{}
	p.SetPublisher(pub)
	ctx := context.Background()
	var taints []string
	for _, fsys := range []*sysfs.MemFS{up, down, up, down, up} {
		s.cur.Store(fsys)
		_, err := p.Rescan(ctx)
		require.NoError(t, err)
		tt := pub.LastDevices()["efa-0000-4f-00-0"].Taints
		switch len(tt) {
		case 0:
			taints = append(taints, "none")
		default:
			taints = append(taints, fmt.Sprintf("%s=%s:%s", tt[0].Key, tt[0].Value, tt[0].Effect))
		}
	}
	assert.Equal(t, []string{
		"none",
		"dra.net/unhealthy=port-not-active:NoSchedule",
		"none", // two changes: under the limit of 3
		"dra.net/unhealthy=port-not-active:NoSchedule",
		"dra.net/degraded=port-flaps:None",
	}, taints)
}

// TestHealthLoopWithoutStream: Run checks health on its own interval with
// no kubelet health stream open (a kubelet without ResourceHealthStatus):
// a port that goes DOWN is tainted within an interval, no uevent and no
// periodic rescan asked for.
func TestHealthLoopWithoutStream(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Health.Interval = 100 * time.Millisecond })
	pub := &drivertest.Recorder{}
	p.SetPublisher(pub)
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()

	s.cur.Store(portDown(t, "4f"))
	start := time.Now()
	require.Eventually(t, func() bool {
		return len(pub.LastDevices()["efa-0000-4f-00-0"].Taints) == 1
	}, 10*time.Second, 5*time.Millisecond)
	t.Logf("tainted %s after the port went DOWN (interval 100ms)", time.Since(start).Round(time.Millisecond))
}
