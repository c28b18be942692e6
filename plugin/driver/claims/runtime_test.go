package claims_test

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

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/podresources/podresourcestest"
)

// TestWatchCDIRestoresSpecs: while WatchCDI runs, an emptied CDI
// directory (its specs and metadata specs removed), and then the
// directory itself removed, get every prepared claim's specs back without
// a restart and without a kubelet call; a claim unprepared meanwhile gets
// none back.
func TestWatchCDIRestoresSpecs(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: filepath.Join(t.TempDir(), "cdi"), data: t.TempDir()}
	n := startOn(t, capture(t), d)
	w := n.files.CDI
	kept := claim("kept", "k7777777-7777-7777-7777-777777777777", "efa-0000-4f-00-0")
	gone := claim("gone", "g8888888-8888-8888-8888-888888888888", "efa-0000-50-00-0")
	require.NoError(t, n.prepareOne(kept).Err)
	require.NoError(t, n.prepareOne(gone).Err)
	meta := filepath.Join(d.data, "dra-device-metadata", "default_kept", "efa", "metadata.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(meta), 0o755))
	require.NoError(t, os.WriteFile(meta, []byte(`{"podClaimName": "efa"}`), 0o644))
	_, err := w.WriteMetadata(string(kept.UID), "efa", meta, "/c")
	require.NoError(t, err)
	require.NoError(t, n.unprepare(gone)[gone.UID])

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); n.WatchCDI(ctx, 200*time.Millisecond) }()
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
	root := capture(t)
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
			n := startOn(t, root, newDirs(t), func(s *setup) { s.deps.Kube = fake.NewClientset(tc.api...) })
			w := n.files.CDI
			require.NoError(t, n.prepareOne(old).Err)
			next := claim("next", "0e170000-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
			r := n.prepareOne(next)
			if !tc.ok {
				require.ErrorContains(t, r.Err, "already prepared for claim default/old ("+string(old.UID)+")")
				return
			}
			require.NoError(t, r.Err)
			assert.Equal(t, specNodesOf(t, w, old.UID), specNodesOf(t, w, next.UID))
			require.NoError(t, n.unprepare(old)[old.UID])
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
	d := newDirs(t)
	root := capture(t)
	newPod := startOn(t, root, d)
	w := newPod.files.CDI
	oldPod := startOn(t, root, d)
	late := claim("late", "1a7e0000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	require.NoError(t, oldPod.prepareOne(late).Err, "prepared by the old pod after the new one loaded the checkpoint")
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
// claim renumbered (Renumbered on its snapshot, then RepairSpecs, as the
// Plugin's Rescan asks) corrects the claim's CDI spec at once, without a
// restart (a container that restarts before the plugin does gets its own
// EFA's new number, not its old one, which now names another EFA); it
// counts it, and records an Event on the Node naming the claim, the old
// and new numbers and the pods that use the claim (from the kubelet).
// The old number stays held until the claim is unprepared.
func TestModuleReloadSeenAtRuntime(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := swapped(capture(t))
	kubelet := podresourcestest.Start(t)
	pods, err := podresources.New(kubelet.Socket)
	require.NoError(t, err)
	defer pods.Close()
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	n := startOn(t, s, d, func(x *setup) { x.deps.Pods, x.deps.Events = pods, rec })
	w := n.files.CDI

	a := claim("a", "a1111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0")
	trainer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trainer"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "efa", ResourceClaimName: &a.Name}},
			Containers: []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "efa"}}}}}}}
	kubelet.SetPods(trainer)
	require.NoError(t, n.prepareOne(a).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, a.UID))
	assert.False(t, n.Renumbered(ctx, n.snap), "nothing renumbered yet")

	// ib_uverbs reloaded: the EFAs at 4f and 50 swapped numbers. The
	// next scan (a uevent, a health check) sees it.
	s.cur.Store(renumbered(t, map[int]int{0: 1, 1: 0}))
	n.scan()
	require.True(t, n.Renumbered(ctx, n.snap), "the scan's snapshot shows claim a's EFA renumbered")
	require.NoError(t, n.RepairSpecs(ctx))
	assert.Equal(t, []string{"/dev/infiniband/uverbs1 231:193"}, specNodesOf(t, w, a.UID), "spec corrected by the repair")
	assert.Equal(t, float64(1), n.metric("efakit_plugin_renumbered_devices_total"))
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
	n.rescan()
	assert.False(t, n.Renumbered(ctx, n.snap), "corrected: nothing renumbered")
	assert.Equal(t, float64(1), n.metric("efakit_plugin_renumbered_devices_total"))

	// The EFA at 50 is uverbs0 now, the number claim a's running
	// container holds: refused, naming the claim and its pod.
	b := claim("b", "b2222222-2222-2222-2222-222222222222", "efa-0000-50-00-0")
	assert.ErrorContains(t, n.prepareOne(b).Err, "a device number that containers of claim default/a ("+string(a.UID)+") (pods default/trainer) were given")
}

// TestRepairLeavesWritesInFlight: a repair while the plugin runs (the CDI
// watch saw a spec missing) writes lost specs back and removes nothing.
// Without POD_UID the kubelet helper takes no lock around its calls, so a
// temporary file in the CDI directory may be the helper writing a claim's
// metadata spec right after the checkpoint; the repair removed it, and
// that prepare failed (seen in TestKubeletPrepareUnprepare on a loaded
// machine). Leftovers are removed at the next load.
func TestRepairLeavesWritesInFlight(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	root := capture(t)
	n := startOn(t, root, d)
	w := n.files.CDI
	kept := claim("kept", "k7777777-7777-7777-7777-777777777777", "efa-0000-4f-00-0")
	require.NoError(t, n.prepareOne(kept).Err)
	inflight := filepath.Join(d.cdi, ".dra.net_metadata_"+string(kept.UID)+"_efa.json.12345.tmp")
	require.NoError(t, os.WriteFile(inflight, []byte("{}"), 0o644))
	path, err := w.SpecPath(string(kept.UID))
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))

	require.NoError(t, n.RepairSpecs(context.Background()))
	assert.FileExists(t, path, "the lost spec written back")
	assert.FileExists(t, inflight, "a write in flight left alone")

	// A load removes what an interrupted write left.
	startOn(t, root, d)
	assert.NoFileExists(t, inflight)
	assert.FileExists(t, path)
}
