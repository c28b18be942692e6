package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

const (
	boot1 = "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
	boot2 = "11111111-2222-4333-8444-555555555555"
)

// claim is a prepared claim of n EFAs.
func claim(i, n int) checkpoint.Claim {
	uid := fmt.Sprintf("6f1c2b9e-1d2a-4c3b-9f8e-%012d", i)
	c := checkpoint.Claim{
		UID: uid, Namespace: "ml", Name: fmt.Sprintf("train-%d-efa", i),
		CDIDeviceIDs: map[string]string{"efa": "dra.net/efa=" + uid + "-efa"},
	}
	for j := range n {
		bus := 0x4f + 0x11*i + j
		c.Devices = append(c.Devices, checkpoint.PreparedDevice{
			Request:    "efa",
			Pool:       "ip-10-0-0-1",
			Device:     fmt.Sprintf("efa-0000-%02x-00-0", bus),
			RDMAName:   fmt.Sprintf("rdmap%ds0", bus),
			Uverbs:     fmt.Sprintf("uverbs%d", 4*i+j),
			PCIAddress: fmt.Sprintf("0000:%02x:00.0", bus),
			Major:      231,
			Minor:      uint32(192 + 4*i + j),
		})
	}
	return c
}

// state holds n claims of 4 EFAs.
func state(bootID string, n int) *checkpoint.State {
	st := &checkpoint.State{Version: checkpoint.Version, BootID: bootID, Claims: map[string]checkpoint.Claim{}}
	for i := range n {
		c := claim(i, 4)
		if i == 1 {
			// The fields of version 2.
			c.Env = map[string][]string{"efa": {"FI_PROVIDER=efa", "FI_EFA_IFACE=rdmap96s0"}}
			c.Devices[0].Stale = []string{"231:199"}
		}
		if i == 2 {
			// The fields of version 3.
			c.Devices[0].ShareID, c.Devices[0].Shares = "5c1f2b4e-8d3a-4e6f-9b70-2a1c3d4e5f60", 2
			c.ExtendedClasses = map[string]string{"container-0-request-0": "efa.networking.k8s.aws"}
		}
		st.Claims[c.UID] = c
	}
	return st
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	assert.Equal(t, filepath.Join(dir, "checkpoint.json"), s.Path())

	st := state(boot1, 3)
	require.NoError(t, s.Save(st))
	got, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Equal(t, st, got)
	assert.Empty(t, got.Dropped)
	assert.Equal(t, []string{"checkpoint.json"}, listDir(t, dir))

	// A new Store (a restarted plugin) reads the same.
	got, err = checkpoint.NewStore(dir).Load(boot1)
	require.NoError(t, err)
	assert.Equal(t, st, got)

	// The file format: version, checksum, data.
	raw, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	var f map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &f))
	assert.Len(t, f, 3)
	assert.JSONEq(t, "3", string(f["version"]))
	var sum string
	require.NoError(t, json.Unmarshal(f["checksum"], &sum))
	assert.Regexp(t, "^[0-9a-f]{64}$", sum)
	assert.Contains(t, string(f["data"]), `"bootID": "`+boot1+`"`)
	info, err := os.Stat(s.Path())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

// TestSaveStampsVersion: Save writes Version whatever st holds, and does
// not change st.
func TestSaveStampsVersion(t *testing.T) {
	t.Parallel()
	s := checkpoint.NewStore(t.TempDir())
	st := state(boot1, 1)
	st.Version = 0
	require.NoError(t, s.Save(st))
	assert.Equal(t, 0, st.Version)
	got, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Equal(t, checkpoint.Version, got.Version)
}

func TestSaveRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	assert.Error(t, s.Save(nil))
	assert.Error(t, s.Save(state("", 1)), "no boot ID")
	st := state(boot1, 2)
	c := st.Claims[claim(0, 4).UID]
	st.Claims["other-uid"] = c
	assert.Error(t, s.Save(st), "claim under another UID")
	assert.Empty(t, listDir(t, dir))
}

func TestMissing(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "not", "there")} {
		got, err := checkpoint.NewStore(dir).Load(boot1)
		require.NoError(t, err)
		assert.Equal(t, &checkpoint.State{Version: checkpoint.Version, BootID: boot1, Claims: map[string]checkpoint.Claim{}}, got)
	}
	_, err := checkpoint.NewStore(t.TempDir()).Load("")
	assert.Error(t, err)
}

// TestSaveCreatesDir: the plugin's data directory may not exist yet.
func TestSaveCreatesDir(t *testing.T) {
	t.Parallel()
	s := checkpoint.NewStore(filepath.Join(t.TempDir(), "plugins", "dra.net"))
	require.NoError(t, s.Save(state(boot1, 1)))
	got, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Len(t, got.Claims, 1)
}

func TestBootIDChange(t *testing.T) {
	t.Parallel()
	s := checkpoint.NewStore(t.TempDir())
	st := state(boot1, 2)
	require.NoError(t, s.Save(st))

	got, err := s.Load(boot2)
	require.NoError(t, err)
	assert.Equal(t, boot2, got.BootID)
	assert.Empty(t, got.Claims)
	assert.NotNil(t, got.Claims)
	require.Len(t, got.Dropped, 2)
	assert.Equal(t, claim(0, 4), got.Dropped[0])
	assert.Equal(t, state(boot1, 2).Claims[claim(1, 4).UID], got.Dropped[1])

	// Load writes nothing: the old boot's claims are still on disk until
	// the plugin saves.
	again, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Equal(t, st, again)

	require.NoError(t, s.Save(got))
	after, err := s.Load(boot2)
	require.NoError(t, err)
	assert.Empty(t, after.Claims)
	assert.Empty(t, after.Dropped)
}

// TestVersions: a version 1 file (an older efakit's) loads; a later
// version (a newer efakit's, before a rollback) is refused and left in
// place, never discarded.
func TestVersions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	v1 := state(boot1, 1) // claim 0 only: no field of version 2 or 3
	v1.Version = 1
	data := resum(t, good(t), func(d map[string]any) {})
	var f map[string]any
	require.NoError(t, json.Unmarshal(data, &f))
	raw, err := json.Marshal(v1)
	require.NoError(t, err)
	f["version"], f["data"], f["checksum"] = 1, json.RawMessage(raw), sha256Hex(raw)
	old, err := json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.Path(), old, 0o600))
	got, err := s.Load(boot1)
	require.NoError(t, err)
	v1.Version = checkpoint.Version
	assert.Equal(t, v1, got, "read as the current version")

	newer := rewrite(t, good(t), func(f map[string]any) {
		f["version"] = checkpoint.Version + 1
		f["data"] = map[string]any{"future": true}
	})
	require.NoError(t, os.WriteFile(s.Path(), newer, 0o600))
	st, err := s.Load(boot1)
	assert.Nil(t, st)
	require.ErrorIs(t, err, checkpoint.ErrNewerVersion)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), fmt.Sprintf("format version %d", checkpoint.Version+1))
	kept, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	assert.Equal(t, newer, kept, "left in place")
	assert.NoFileExists(t, s.Path()+checkpoint.CorruptSuffix)
}

func TestNoTempFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	for i := range 5 {
		require.NoError(t, s.Save(state(boot1, i)))
	}
	assert.Equal(t, []string{"checkpoint.json"}, listDir(t, dir))
}

// TestConcurrentSave: Saves from several goroutines (gRPC calls in
// parallel) leave one whole checkpoint, one of the states saved.
func TestConcurrentSave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	const n = 8
	states := make([]*checkpoint.State, n)
	for i := range states {
		states[i] = state(boot1, i+1)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for range 5 {
				assert.NoError(t, s.Save(states[i]))
				_, err := s.Load(boot1)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	got, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Contains(t, states, got)
	assert.Equal(t, []string{"checkpoint.json"}, listDir(t, dir))
}

// FuzzLoad: whatever the checkpoint file holds, Load does not panic, and
// either succeeds or reports ErrCorrupt with an empty state.
// TestLoadFuzzSeeds runs what FuzzDecode checks through the whole Load, on
// the seeds: file I/O is too slow (a temporary directory, a rename and a
// sync a case) to fuzz through, so the fuzz target takes decode alone.
func TestLoadFuzzSeeds(t *testing.T) {
	t.Parallel()
	s := checkpoint.NewStore(t.TempDir())
	require.NoError(t, s.Save(state(boot1, 2)))
	g, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	for _, data := range [][]byte{g, g[:len(g)/2], {}, []byte("null"), []byte(`{"version":1,"checksum":"","data":{}}`), []byte(`{"version":1}`)} {
		dir := t.TempDir()
		s := checkpoint.NewStore(dir)
		require.NoError(t, os.WriteFile(s.Path(), data, 0o600))
		st, err := s.Load(boot1)
		if err != nil {
			require.ErrorIs(t, err, checkpoint.ErrCorrupt)
			require.NotNil(t, st)
			assert.Empty(t, st.Claims)
			assert.Equal(t, boot1, st.BootID)
			continue
		}
		require.Equal(t, checkpoint.Version, st.Version)
		for uid, c := range st.Claims {
			require.Equal(t, uid, c.UID)
		}
	}
}

func BenchmarkSave(b *testing.B) {
	s := checkpoint.NewStore(b.TempDir())
	st := state(boot1, 4)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Save(st); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReload: Reload reads the file only when it is not the one the Store
// last read or wrote: replaced (another plugin pod's Save), written into,
// removed, or read under another boot ID.
func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var opens int
	s := checkpoint.NewStore(dir)
	s.Open = func(name string) (*os.File, error) { opens++; return os.Open(name) }
	reload := func(have *checkpoint.State, bootID string) (*checkpoint.State, int) {
		t.Helper()
		before := opens
		got, err := s.Reload(bootID, have)
		require.NoError(t, err)
		return got, opens - before
	}

	empty, err := s.Load(boot1)
	require.NoError(t, err)
	got, n := reload(empty, boot1)
	assert.Same(t, empty, got, "still no file")
	assert.Zero(t, n)

	st := state(boot1, 2)
	require.NoError(t, s.Save(st))
	got, n = reload(st, boot1)
	assert.Same(t, st, got, "the file Save wrote")
	assert.Zero(t, n)
	got, n = reload(state(boot1, 2), boot1)
	assert.Equal(t, st, got, "another State than the one saved: read")
	assert.Equal(t, 1, n)
	got, n = reload(got, boot1)
	assert.Zero(t, n, "the State read")

	// Another process saves: a new file.
	other := state(boot1, 3)
	require.NoError(t, checkpoint.NewStore(dir).Save(other))
	got, n = reload(got, boot1)
	assert.Equal(t, other, got)
	assert.Equal(t, 1, n)

	// Written into: the same file, another content.
	f, err := os.OpenFile(s.Path(), os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.Write(good(t))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	got, n = reload(got, boot1)
	assert.Equal(t, 1, n)
	assert.Len(t, got.Claims, 2)

	// Another boot ID, then a removed file.
	got, n = reload(got, boot2)
	assert.Equal(t, 1, n)
	assert.Empty(t, got.Claims)
	assert.Len(t, got.Dropped, 2)
	require.NoError(t, os.Remove(s.Path()))
	got, n = reload(got, boot2)
	assert.Equal(t, 1, n)
	assert.Empty(t, got.Dropped)
	got2, n := reload(got, boot2)
	assert.Same(t, got, got2)
	assert.Zero(t, n)
}

// TestFormatVersionIsTheOldestThatHolds: Save writes version 2 where the
// state uses nothing of version 3, so that the efakit before it (which
// refuses a later version) can take a node over after a rollback; a share
// or an extended-resource claim's classes make it 3.
func TestFormatVersionIsTheOldestThatHolds(t *testing.T) {
	t.Parallel()
	fileVersion := func(st *checkpoint.State) string {
		s := checkpoint.NewStore(t.TempDir())
		require.NoError(t, s.Save(st))
		raw, err := os.ReadFile(s.Path())
		require.NoError(t, err)
		var f map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &f))
		return string(f["version"])
	}
	st := state(boot1, 2) // claims 0 and 1: version 2's fields at most
	assert.Equal(t, "2", fileVersion(st))
	share := state(boot1, 2)
	c := share.Claims["6f1c2b9e-1d2a-4c3b-9f8e-000000000000"]
	require.NotEmpty(t, c.Devices)
	c.Devices = slices.Clone(c.Devices)
	c.Devices[0].ShareID = "5c1f2b4e-8d3a-4e6f-9b70-2a1c3d4e5f60"
	share.Claims[c.UID] = c
	assert.Equal(t, "3", fileVersion(share))
	ext := state(boot1, 1)
	c = ext.Claims["6f1c2b9e-1d2a-4c3b-9f8e-000000000000"]
	c.ExtendedClasses = map[string]string{"container-0-request-0": "efa.networking.k8s.aws"}
	ext.Claims[c.UID] = c
	assert.Equal(t, "3", fileVersion(ext))
}
