package claims_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claims"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
)

// TestModuleReload: after a module reload renumbers the uverbs devices
// without a reboot, no claim gets a device number that another claim's
// containers were given, and the specs of prepared claims are corrected
// from sysfs, the old number staying held until the claim is unprepared.
func TestModuleReload(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := swapped(capture(t))
	n := startOn(t, s, d)
	w := n.files.CDI

	a := claim("a", "a1111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0")
	require.NoError(t, n.prepareOne(a).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, a.UID))

	// ib_uverbs reloaded: the EFAs at 4f and 50 swapped numbers.
	s.cur.Store(renumbered(t, map[int]int{0: 1, 1: 0}))
	b := claim("b", "b2222222-2222-2222-2222-222222222222", "efa-0000-50-00-0")
	r := n.prepareOne(b)
	require.Error(t, r.Err, "the EFA at 50 is uverbs0 (231:192) now, which claim a's containers hold")
	assert.ErrorContains(t, r.Err, "uverbs0 (231:192) now, a device number that containers of claim default/a ("+string(a.UID)+") were given")

	// A restart (a new load) corrects claim a's spec from sysfs.
	n = startOn(t, s, d)
	w = n.files.CDI
	assert.Equal(t, []string{"/dev/infiniband/uverbs1 231:193"}, specNodesOf(t, w, a.UID), "spec corrected")
	st, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Equal(t, []string{"231:192"}, st.Claims[string(a.UID)].Devices[0].Stale, "the old number stays held")
	assert.Equal(t, float64(1), n.metric("efakit_plugin_renumbered_devices_total"))
	assert.Error(t, n.prepareOne(b).Err, "still held by claim a's older containers")

	// A repeated prepare of claim a with another allocation is refused.
	moved := claim("a", string(a.UID), "efa-0000-51-00-0")
	assert.ErrorContains(t, n.prepareOne(moved).Err, "prepared for efa:efa-0000-4f-00-0, but now allocated efa:efa-0000-51-00-0")
	// The same allocation again is answered with the corrected spec.
	require.NoError(t, n.prepareOne(a).Err)

	// Claim a ends: its numbers are free, and claim b gets uverbs0.
	require.NoError(t, n.unprepare(a)[a.UID])
	require.NoError(t, n.prepareOne(b).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, w, b.UID))
}

// TestPrepareReadsSysfsNow: a prepare after a renumbering that no scan has
// seen yet gives the container the numbers sysfs has now, not the
// snapshot's.
func TestPrepareReadsSysfsNow(t *testing.T) {
	t.Parallel()
	s := swapped(capture(t))
	n := startOn(t, s, newDirs(t))
	s.cur.Store(renumbered(t, map[int]int{0: 40, 1: 41}))
	c := claim("c", "c3333333-3333-3333-3333-333333333333", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	require.NoError(t, n.prepareOne(c).Err)
	assert.Equal(t, []string{"/dev/infiniband/uverbs40 231:232", "/dev/infiniband/uverbs41 231:233"}, specNodesOf(t, n.files.CDI, c.UID))
}

// TestRestoreCleansUp: a load removes what no checkpointed claim owns
// (temporary files of interrupted writes, specs and metadata of claims it
// does not hold) and keeps what it holds.
func TestRestoreCleansUp(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	root := capture(t)
	n := startOn(t, root, d)
	w := n.files.CDI
	kept := claim("kept", "k4444444-4444-4444-4444-444444444444", "efa-0000-4f-00-0")
	require.NoError(t, n.prepareOne(kept).Err)
	orphan := "0a0a0a0a-0000-0000-0000-000000000000"
	_, err := w.Write(orphan, map[string]cdi.Request{"efa": {Devices: []cdi.Device{{Name: "rdmap80s0", Uverbs: "uverbs1", Major: 231, Minor: 193}}}})
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

	startOn(t, root, d)
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
	d := newDirs(t)
	n := startOn(t, capture(t), d)
	c := claim("c", "c5555555-5555-5555-5555-555555555555", "efa-0000-4f-00-0")
	require.NoError(t, n.prepareOne(c).Err)
	// The checkpoint cannot be replaced: a directory stands in its name.
	cp := filepath.Join(d.data, checkpoint.FileName)
	require.NoError(t, os.Rename(cp, cp+".saved"))
	require.NoError(t, os.MkdirAll(filepath.Join(cp, "x"), 0o755))
	require.Error(t, n.unprepare(c)[c.UID])
	ok, err := n.files.CDI.Exists(string(c.UID))
	require.NoError(t, err)
	assert.True(t, ok, "the spec stays while the claim is recorded")
	assert.Equal(t, []string{string(c.UID)}, n.Prepared(), "still prepared")
}

// TestRestoreWaitsForLock: loading takes the lock file the kubelet plugin
// helper holds around prepare and unprepare in a rolling update, so it
// never runs beside the other plugin pod's calls, and says that it waits
// and for how long.
func TestRestoreWaitsForLock(t *testing.T) {
	t.Parallel()
	ctx, logged := drivertest.Logger(t)
	d := newDirs(t)
	unlock, err := claims.LockDataDir(ctx, d.data)
	require.NoError(t, err)
	s := newSetup(t, capture(t), d)
	s.ctx = ctx
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = claims.Load(ctx, s.files, claims.Node{Driver: s.cfg.Driver(), Name: node}, s.deps)
	}()
	select {
	case <-done:
		t.Fatal("restore ran while the lock was held")
	case <-time.After(300 * time.Millisecond):
	}
	waiting := drivertest.Entries(logged(), "Waiting for the data directory's lock (a prepare or unprepare of another plugin pod holds it)")
	require.Len(t, waiting, 1, "a load that waits says so")
	assert.Equal(t, filepath.Join(d.data, "serialize.lock"), drivertest.KV(waiting[0])["path"])
	unlockAt := time.Now()
	unlock()
	<-done
	took := drivertest.Entries(logged(), "Took the data directory's lock")
	require.Len(t, took, 1)
	assert.GreaterOrEqual(t, drivertest.KV(took[0])["waited"], unlockAt.Sub(waiting[0].Timestamp), "the wait lasted until the lock was free")
}

// TestNewerCheckpointRefused: a checkpoint written by a newer efakit (a
// rollback) gives no claim state and a clear error, and stays as it was.
func TestNewerCheckpointRefused(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	newer := []byte(`{"version": 9, "checksum": "", "data": {}}`)
	require.NoError(t, os.WriteFile(filepath.Join(d.data, checkpoint.FileName), newer, 0o600))
	s := newSetup(t, capture(t), d)
	st, err := claims.Load(s.ctx, s.files, claims.Node{Driver: s.cfg.Driver(), Name: node}, s.deps)
	assert.Nil(t, st)
	require.ErrorIs(t, err, checkpoint.ErrNewerVersion)
	got, err := os.ReadFile(filepath.Join(d.data, checkpoint.FileName))
	require.NoError(t, err)
	assert.Equal(t, newer, got)
}
