package driver_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
	"github.com/efakit/efakit/plugin/driver/claims"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

var uverbsName = regexp.MustCompile(`\buverbs(\d+)\b`)

// renumbered is the p5 fixture after an efa or ib_uverbs module reload that
// gave the uverbs devices new numbers: uverbs<a> becomes uverbs<to[a]>,
// with its character device number, everywhere sysfs shows it.
func renumbered(t *testing.T, to map[int]int) *sysfs.MemFS {
	t.Helper()
	re := func(s string) string {
		return uverbsName.ReplaceAllStringFunc(s, func(m string) string {
			var n int
			fmt.Sscanf(m, "uverbs%d", &n)
			if v, ok := to[n]; ok {
				return fmt.Sprintf("uverbs%d", v)
			}
			return m
		})
	}
	return edit(t, func(e *sysfs.Entry) bool {
		old := e.Path
		e.Path, e.Target = re(e.Path), re(e.Target)
		if m := uverbsName.FindStringSubmatch(old); m != nil && filepath.Base(old) == "dev" {
			var n int
			fmt.Sscanf(m[1], "%d", &n)
			if v, ok := to[n]; ok {
				e.Data = []byte(fmt.Sprintf("231:%d\n", 192+v))
			}
		}
		return true
	})
}

// node state shared by plugin restarts in one test.
type dirs struct{ cdi, data string }

func startPlugin(t *testing.T, fsys fs.ReadLinkFS, d dirs) (*driver.Plugin, *cdi.Writer) {
	t.Helper()
	w, err := cdi.NewWriter(d.cdi, "dra.net")
	require.NoError(t, err)
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
		Config: resources.Config{NodeName: node}, SysfsRoot: fsys, CDI: w,
		Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data,
	})
	require.NoError(t, err)
	_, err = p.Rescan(context.Background())
	require.NoError(t, err)
	return p, w
}

func prepareOne(t *testing.T, p *driver.Plugin, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	return res[c.UID]
}

func specNodesOf(t *testing.T, w *cdi.Writer, uid types.UID) []string {
	t.Helper()
	spec, err := w.Load(string(uid))
	require.NoError(t, err)
	var out []string
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			out = append(out, fmt.Sprintf("%s %d:%d", n.Path, n.Major, n.Minor))
		}
	}
	return out
}

// TestModuleReload: after a module reload renumbers the uverbs devices
// without a reboot, no claim gets a device number that another claim's
// containers were given, and the specs of prepared claims are corrected
// from sysfs, the old number staying held until the claim is unprepared.
func TestModuleReload(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p, w := startPlugin(t, s, d)

	a := claim("a", "a1111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0")
	require.NoError(t, prepareOne(t, p, a).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, a.UID))

	// ib_uverbs reloaded: the EFAs at 4f and 50 swapped numbers.
	s.cur.Store(renumbered(t, map[int]int{0: 1, 1: 0}))
	b := claim("b", "b2222222-2222-2222-2222-222222222222", "efa-0000-50-00-0")
	r := prepareOne(t, p, b)
	require.Error(t, r.Err, "the EFA at 50 is uverbs0 (231:192) now, which claim a's containers hold")
	assert.ErrorContains(t, r.Err, "uverbs0 (231:192) now, a device number that containers of claim default/a ("+string(a.UID)+") were given")

	// A plugin restart corrects claim a's spec from sysfs.
	p, w = startPlugin(t, s, d)
	assert.Equal(t, []string{"/dev/infiniband/uverbs1 231:193"}, specNodesOf(t, w, a.UID), "spec corrected")
	st, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Equal(t, []string{"231:192"}, st.Claims[string(a.UID)].Devices[0].Stale, "the old number stays held")
	assert.Equal(t, float64(1), metricValue(t, p, "efakit_plugin_renumbered_devices_total"))
	assert.Error(t, prepareOne(t, p, b).Err, "still held by claim a's older containers")

	// A repeated prepare of claim a with another allocation is refused.
	moved := claim("a", string(a.UID), "efa-0000-51-00-0")
	assert.ErrorContains(t, prepareOne(t, p, moved).Err, "prepared for efa:efa-0000-4f-00-0, but now allocated efa:efa-0000-51-00-0")
	// The same allocation again is answered with the corrected spec.
	require.NoError(t, prepareOne(t, p, a).Err)

	// Claim a ends: its numbers are free, and claim b gets uverbs0.
	u, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: a.UID}})
	require.NoError(t, err)
	require.NoError(t, u[a.UID])
	require.NoError(t, prepareOne(t, p, b).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, b.UID))
}

// TestPrepareReadsSysfsNow: a prepare after a renumbering that no scan has
// seen yet gives the container the numbers sysfs has now, not the last
// scan's.
func TestPrepareReadsSysfsNow(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	p, w := startPlugin(t, s, dirs{cdi: t.TempDir(), data: t.TempDir()})
	s.cur.Store(renumbered(t, map[int]int{0: 40, 1: 41}))
	c := claim("c", "c3333333-3333-3333-3333-333333333333", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	require.NoError(t, prepareOne(t, p, c).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs40 231:232", "/dev/infiniband/uverbs41 231:233"}, specNodesOf(t, w, c.UID))
}

func metricValue(t *testing.T, p *driver.Plugin, name string) float64 {
	t.Helper()
	mfs, err := p.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRestoreCleansUp: a start removes what no checkpointed claim owns
// (temporary files of interrupted writes, specs and metadata of claims it
// does not hold) and keeps what it holds.
func TestRestoreCleansUp(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	p, w := startPlugin(t, root, d)
	kept := claim("kept", "k4444444-4444-4444-4444-444444444444", "efa-0000-4f-00-0")
	require.NoError(t, prepareOne(t, p, kept).Err)
	orphan := "0a0a0a0a-0000-0000-0000-000000000000"
	_, err = w.Write(orphan, map[string]cdi.Request{"efa": {Devices: []cdi.Device{{Name: "rdmap80s0", Uverbs: "uverbs1", Major: 231, Minor: 193}}}})
	require.NoError(t, err)
	_, err = w.WriteMetadata(orphan, "efa", "/h", "/c")
	require.NoError(t, err)
	_, err = w.WriteMetadata(string(kept.UID), "efa", "/h", "/c")
	require.NoError(t, err)
	for _, f := range []string{
		filepath.Join(d.cdi, ".dra.net-efa_"+orphan+".json.1.tmp"),
		filepath.Join(d.data, ".checkpoint.json.2.tmp"),
		filepath.Join(d.data, "dra-device-metadata", "default_gone", "efa", "metadata.json"),
		filepath.Join(d.data, "dra-device-metadata", "default_kept", "efa", "metadata.json"),
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
		require.NoError(t, os.WriteFile(f, []byte("{}"), 0o644))
	}

	startPlugin(t, root, d)
	f, err := w.List()
	require.NoError(t, err)
	assert.Equal(t, []string{string(kept.UID)}, f.Specs)
	assert.Equal(t, map[string][]string{string(kept.UID): {"dra.net_metadata_" + string(kept.UID) + "_efa.json"}}, f.Metadata)
	assert.Empty(t, f.Temp)
	assert.NoFileExists(t, filepath.Join(d.data, ".checkpoint.json.2.tmp"))
	assert.NoDirExists(t, filepath.Join(d.data, "dra-device-metadata", "default_gone"))
	assert.FileExists(t, filepath.Join(d.data, "dra-device-metadata", "default_kept", "efa", "metadata.json"))
}

// TestUnprepareSavesFirst: when the checkpoint cannot be saved, unprepare
// fails and leaves the spec: the claim stays prepared as a whole, so the
// kubelet's retry finds it, and no spec of an unprepared claim comes back.
func TestUnprepareSavesFirst(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	p, w := startPlugin(t, root, d)
	c := claim("c", "c5555555-5555-5555-5555-555555555555", "efa-0000-4f-00-0")
	require.NoError(t, prepareOne(t, p, c).Err)
	// The checkpoint cannot be replaced: a directory stands in its name.
	cp := filepath.Join(d.data, checkpoint.FileName)
	require.NoError(t, os.Rename(cp, cp+".saved"))
	require.NoError(t, os.MkdirAll(filepath.Join(cp, "x"), 0o755))
	u, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
	require.NoError(t, err)
	require.Error(t, u[c.UID])
	ok, err := w.Exists(string(c.UID))
	require.NoError(t, err)
	assert.True(t, ok, "the spec stays while the claim is recorded")
}

// TestRestoreWaitsForLock: restoring takes the lock file the kubelet
// plugin helper holds around prepare and unprepare in a rolling update, so
// it never runs beside the other plugin pod's calls, and says that it waits
// and for how long.
func TestRestoreWaitsForLock(t *testing.T) {
	t.Parallel()
	ctx, logged := testLogger(t)
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	unlock, err := claims.LockDataDir(ctx, d.data)
	require.NoError(t, err)
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, err := cdi.NewWriter(d.cdi, "dra.net")
		if err != nil {
			return
		}
		_, _ = driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w,
			Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data})
	}()
	select {
	case <-done:
		t.Fatal("restore ran while the lock was held")
	case <-time.After(300 * time.Millisecond):
	}
	waiting := entries(logged(), "Waiting for the data directory's lock (a prepare or unprepare of another plugin pod holds it)")
	require.Len(t, waiting, 1, "a start that waits says so")
	assert.Equal(t, filepath.Join(d.data, "serialize.lock"), kv(waiting[0])["path"])
	unlockAt := time.Now()
	unlock()
	<-done
	took := entries(logged(), "Took the data directory's lock")
	require.Len(t, took, 1)
	assert.GreaterOrEqual(t, kv(took[0])["waited"], unlockAt.Sub(waiting[0].Timestamp), "the wait lasted until the lock was free")
}

// TestNewerCheckpointRefused: a checkpoint written by a newer efakit (a
// rollback) stops the plugin with a clear error and stays as it was.
func TestNewerCheckpointRefused(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	newer := []byte(`{"version": 9, "checksum": "", "data": {}}`)
	require.NoError(t, os.WriteFile(filepath.Join(d.data, checkpoint.FileName), newer, 0o600))
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	w, err := cdi.NewWriter(d.cdi, "dra.net")
	require.NoError(t, err)
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w,
		Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data})
	assert.Nil(t, p)
	require.ErrorIs(t, err, checkpoint.ErrNewerVersion)
	got, err := os.ReadFile(filepath.Join(d.data, checkpoint.FileName))
	require.NoError(t, err)
	assert.Equal(t, newer, got)
}
