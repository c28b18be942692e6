package claims_test

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
)

// TestCheckpointReadOnlyWhenChanged: a kubelet call reads the checkpoint
// file only when someone else changed it since the claim state last read
// or wrote it (the other plugin pod of a rolling update); then it reads
// it, and sees that pod's claim.
func TestCheckpointReadOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	var opens atomic.Int64
	mk := func(count bool) *state {
		return startOn(t, capture(t), d, func(s *setup) {
			s.files.DataDir = ""
			if count {
				s.files.Store.Open = func(name string) (*os.File, error) { opens.Add(1); return os.Open(name) }
			}
		})
	}
	n := mk(true)
	a := claim("a", "c3c3c3c3-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	b := claim("b", "c3c3c3c3-0000-0000-0000-000000000002", "efa-0000-50-00-0")
	thief := claim("thief", "c3c3c3c3-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	reads := func(f func()) int64 {
		before := opens.Load()
		f()
		return opens.Load() - before
	}
	assert.Zero(t, reads(func() { require.NoError(t, n.prepareOne(a).Err) }), "no checkpoint yet, none read")
	assert.Zero(t, reads(func() { require.NoError(t, n.prepareOne(a).Err) }), "the checkpoint this state wrote: not read")
	assert.Zero(t, reads(func() { require.NoError(t, n.unprepare(a)[a.UID]) }))
	assert.Zero(t, reads(func() { require.NoError(t, n.prepareOne(a).Err) }))

	// The other pod of a rolling update prepares b: the next call reads the
	// checkpoint, once, and refuses b's EFA to another claim.
	other := mk(false)
	require.NoError(t, other.prepareOne(b).Err)
	assert.EqualValues(t, 1, reads(func() {
		assert.ErrorContains(t, n.prepareOne(thief).Err, "already prepared for claim "+b.Namespace+"/"+b.Name+" ("+string(b.UID)+")")
	}))
	assert.Zero(t, reads(func() {
		assert.ErrorContains(t, n.prepareOne(thief).Err, "already prepared for claim "+b.Namespace+"/"+b.Name+" ("+string(b.UID)+")")
	}))
	assert.Equal(t, []string{string(a.UID), string(b.UID)}, n.Prepared())
}

// TestPrepareBatch: a call's claims are saved together, with one fsync:
// they see each other before the save (two claims of a call that want one
// EFA get it once), and when the save fails none of them is prepared, the
// state before the call stands and their specs are gone again.
func TestPrepareBatch(t *testing.T) {
	t.Parallel()
	var syncs atomic.Int64
	var fail atomic.Bool
	count := func(*os.File) error {
		syncs.Add(1)
		if fail.Load() {
			return errors.New("no space left on device")
		}
		return nil
	}
	n := startOn(t, capture(t), newDirs(t), func(s *setup) {
		s.files.DataDir = ""
		s.files.CDI.Sync, s.files.Store.Sync = count, count
	})
	w := n.files.CDI
	a := claim("a", "d4d4d4d4-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	b := claim("b", "d4d4d4d4-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
	c := claim("c", "d4d4d4d4-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	d := claim("d", "d4d4d4d4-0000-0000-0000-000000000004", "efa-0000-51-00-0")
	res := n.prepare(a, b, c)
	require.NoError(t, res[a.UID].Err)
	assert.ErrorContains(t, res[b.UID].Err, "already prepared for claim "+a.Namespace+"/"+a.Name+" ("+string(a.UID)+")")
	require.NoError(t, res[c.UID].Err)
	assert.Equal(t, []string{string(a.UID), string(c.UID)}, n.Prepared())
	assert.EqualValues(t, 1, syncs.Load(), "one save for the call")
	require.NoError(t, n.unprepare(c)[c.UID])
	before := syncs.Load()

	// The disk fails the fsync: the save is not made.
	fail.Store(true)
	res = n.prepare(c, d)
	for _, x := range []*resourceapi.ResourceClaim{c, d} {
		assert.ErrorContains(t, res[x.UID].Err, "no space left on device", x.Name)
		assert.Empty(t, res[x.UID].Devices, x.Name)
		ok, err := w.Exists(string(x.UID))
		require.NoError(t, err)
		assert.False(t, ok, "%s: not recorded, so no spec", x.Name)
	}
	assert.Equal(t, []string{string(a.UID)}, n.Prepared(), "the state before the call")
	assert.Equal(t, before+1, syncs.Load(), "one save tried")

	// The disk is back: both prepare, in one save.
	fail.Store(false)
	res = n.prepare(c, d)
	require.NoError(t, res[c.UID].Err)
	require.NoError(t, res[d.UID].Err)
	assert.Equal(t, []string{string(a.UID), string(c.UID), string(d.UID)}, n.Prepared())
	assert.Equal(t, before+2, syncs.Load())
	ok, err := w.Exists(string(d.UID))
	require.NoError(t, err)
	assert.True(t, ok)
}
