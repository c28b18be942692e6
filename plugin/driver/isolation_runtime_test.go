package driver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/podresources/podresourcestest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// TestWatchCDIRestoresSpecs: while the plugin runs, an emptied CDI
// directory (its specs and metadata specs removed), and then the
// directory itself removed, get every prepared claim's specs back without
// a restart and without a kubelet call; a claim unprepared meanwhile gets
// none back.
func TestWatchCDIRestoresSpecs(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: filepath.Join(t.TempDir(), "cdi"), data: t.TempDir()}
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	p, w := startPlugin(t, root, d)
	kept := claim("kept", "k7777777-7777-7777-7777-777777777777", "efa-0000-4f-00-0")
	gone := claim("gone", "g8888888-8888-8888-8888-888888888888", "efa-0000-50-00-0")
	require.NoError(t, prepareOne(t, p, kept).Err)
	require.NoError(t, prepareOne(t, p, gone).Err)
	meta := filepath.Join(d.data, "dra-device-metadata", "default_kept", "efa", "metadata.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(meta), 0o755))
	require.NoError(t, os.WriteFile(meta, []byte(`{"podClaimName": "efa"}`), 0o644))
	_, err = w.WriteMetadata(string(kept.UID), "efa", meta, "/c")
	require.NoError(t, err)
	u, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: gone.UID}})
	require.NoError(t, err)
	require.NoError(t, u[gone.UID])

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); p.WatchCDI(ctx, 200*time.Millisecond) }()
	restored := func() bool {
		f, err := w.List()
		return err == nil && slices.Equal(f.Specs, []string{string(kept.UID)}) && len(f.Metadata[string(kept.UID)]) == 1
	}
	require.Eventually(t, restored, 5*time.Second, 10*time.Millisecond, "specs as prepared at first")

	for _, wipe := range []func() error{
		func() error { // rm /var/run/cdi/*
			entries, err := os.ReadDir(d.cdi)
			for _, e := range entries {
				err = errors.Join(err, os.Remove(filepath.Join(d.cdi, e.Name())))
			}
			return err
		},
		func() error { return os.RemoveAll(d.cdi) }, // rm -r /var/run/cdi
	} {
		require.NoError(t, wipe())
		require.Eventually(t, restored, 5*time.Second, 10*time.Millisecond, "the kept claim's specs back")
		assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, kept.UID))
	}
	cancel()
	<-done
}

// TestPrepareAfterForcedDelete: a pod deleted without waiting for the
// kubelet (grace period 0) frees its claim in the API at once, and the
// real kubelet then prepares the next pod's claim for the same EFA before
// it unprepares the old claim (seen through a real kubelet: the refusal
// cost the next pod 80-90 s, the kubelet's resync). The EFA is handed on
// when the API says the old claim no longer holds it, and refused while it
// does; the old claim's spec stays until its unprepare.
func TestPrepareAfterForcedDelete(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	old := claim("old", "01d00000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	for _, tc := range []struct {
		name string
		api  []runtime.Object // the old claim as the API has it now
		ok   bool
	}{
		{"still allocated", []runtime.Object{old.DeepCopy()}, false},
		{"deleted", nil, true},
		{"deallocated", []runtime.Object{func() *resourceapi.ResourceClaim { c := old.DeepCopy(); c.Status.Allocation = nil; return c }()}, true},
		{"same name, new claim", []runtime.Object{claim("old", "01d00000-0000-0000-0000-000000000009", "efa-0000-4f-00-0")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dirs{cdi: t.TempDir(), data: t.TempDir()}
			w, err := cdi.NewWriter(d.cdi, "dra.net")
			require.NoError(t, err)
			p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
				Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w, KubeClient: fake.NewClientset(tc.api...),
				Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data,
			})
			require.NoError(t, err)
			_, err = p.Rescan(context.Background())
			require.NoError(t, err)
			require.NoError(t, prepareOne(t, p, old).Err)
			next := claim("next", "0e170000-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
			r := prepareOne(t, p, next)
			if !tc.ok {
				require.ErrorContains(t, r.Err, "already prepared for claim default/old ("+string(old.UID)+")")
				return
			}
			require.NoError(t, r.Err)
			assert.Equal(t, specNodesOf(t, w, old.UID), specNodesOf(t, w, next.UID))
			u, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: old.UID}})
			require.NoError(t, err)
			require.NoError(t, u[old.UID])
			assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, next.UID), "the old claim's unprepare leaves the new one's spec")
		})
	}
}

// TestRepairSpecsDuringRollingUpdate: two plugin pods share the node's
// directories while the kubelet hands the driver over; a spec the old one
// lost is written again by the new one's repair, which reads the
// checkpoint as it is now, so it neither misses the claim the old one
// prepared after the new one started nor removes its spec.
func TestRepairSpecsDuringRollingUpdate(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	newPod, w := startPlugin(t, root, d)
	oldPod, _ := startPlugin(t, root, d)
	late := claim("late", "1a7e0000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	require.NoError(t, prepareOne(t, oldPod, late).Err, "prepared by the old pod after the new one loaded the checkpoint")
	require.NoError(t, newPod.RepairSpecs(context.Background()))
	ok, err := w.Exists(string(late.UID))
	require.NoError(t, err)
	assert.True(t, ok, "the new pod's repair keeps the old pod's claim")
	path, err := w.SpecPath(string(late.UID))
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, newPod.RepairSpecs(context.Background()))
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, late.UID), "and writes its lost spec again")
}

// TestModuleReloadSeenAtRuntime: a scan that finds an EFA of a prepared
// claim renumbered corrects the claim's CDI spec at once, without a plugin
// restart (a container that restarts before the plugin does gets its own
// EFA's new number, not its old one, which now names another EFA); it
// counts it, and records an Event on the Node naming the claim, the old
// and new numbers and the pods that use the claim (from the kubelet).
// The old number stays held until the claim is unprepared.
func TestModuleReloadSeenAtRuntime(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	kubelet := podresourcestest.Start(t)
	pods, err := podresources.New(kubelet.Socket)
	require.NoError(t, err)
	defer pods.Close()
	w, err := cdi.NewWriter(d.cdi, "dra.net")
	require.NoError(t, err)
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
		Config: resources.Config{NodeName: node}, SysfsRoot: s, CDI: w, Pods: pods,
		Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data, Hooks: driver.Hooks{Events: rec},
	})
	require.NoError(t, err)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)

	a := claim("a", "a1111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0")
	trainer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trainer"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "efa", ResourceClaimName: &a.Name}},
			Containers: []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "efa"}}}}}}}
	kubelet.SetPods(trainer)
	require.NoError(t, prepareOne(t, p, a).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, a.UID))

	// ib_uverbs reloaded: the EFAs at 4f and 50 swapped numbers. The
	// next scan (a uevent, a health check) sees it.
	s.cur.Store(renumbered(t, map[int]int{0: 1, 1: 0}))
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs1 231:193"}, specNodesOf(t, w, a.UID), "spec corrected by the scan")
	assert.Equal(t, float64(1), metricValue(t, p, "efakit_plugin_renumbered_devices_total"))
	st, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Equal(t, []string{"231:192"}, st.Claims[string(a.UID)].Devices[0].Stale, "the old number stays held")
	require.Eventually(t, func() bool { return len(nodeEvents(t, client)) == 1 }, 10*time.Second, 10*time.Millisecond)
	ev := nodeEvents(t, client)[0]
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Equal(t, events.ReasonRenumbered, ev.Reason)
	assert.Contains(t, ev.Message, "EFAs of claim default/a renumbered")
	assert.Contains(t, ev.Message, "efa-0000-4f-00-0 was rdmap79s0 uverbs0 231:192, is rdmap79s0 uverbs1 231:193")
	assert.Contains(t, ev.Message, "containers of pods default/trainer that started before hold the old numbers")

	// Scans after it change nothing more.
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	assert.Equal(t, float64(1), metricValue(t, p, "efakit_plugin_renumbered_devices_total"))

	// The EFA at 50 is uverbs0 now, the number claim a's running
	// container holds: refused, naming the claim and its pod.
	b := claim("b", "b2222222-2222-2222-2222-222222222222", "efa-0000-50-00-0")
	assert.ErrorContains(t, prepareOne(t, p, b).Err, "a device number that containers of claim default/a ("+string(a.UID)+") (pods default/trainer) were given")
}
