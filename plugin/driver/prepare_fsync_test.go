package driver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// TestFsyncsPerCall counts the fsyncs of kubelet calls through the gRPC
// service (the plugin, its CDI specs and checkpoint, and the helper's
// device metadata): a prepare of one claim and a prepare of four claims
// make the same number, one (the checkpoint's), and so do the unprepares.
// Before, each claim cost eight: the spec, the checkpoint and the two
// metadata files, each synced with its directory.
func TestFsyncsPerCall(t *testing.T) {
	t.Parallel()
	var syncs atomic.Int64
	one := claim("one", "a1a1a1a1-0000-0000-0000-000000000001", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	var four []*resourceapi.ResourceClaim
	for k := range 4 {
		four = append(four, claim(fmt.Sprintf("four-%d", k), fmt.Sprintf("b2b2b2b2-0000-0000-0000-00000000000%d", k),
			fmt.Sprintf("efa-0000-%02x-00-0", 0x60+0x11*k), fmt.Sprintf("efa-0000-%02x-00-0", 0x61+0x11*k)))
	}
	dir, err := os.MkdirTemp("", "efa") // short: the sockets go beneath it
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	dra := servePlugin(t, dir, dir, func(*os.File) error { syncs.Add(1); return nil }, append([]*resourceapi.ResourceClaim{one}, four...)...)
	ctx := context.Background()
	refs := func(cs ...*resourceapi.ResourceClaim) []*drapb.Claim {
		var out []*drapb.Claim
		for _, c := range cs {
			out = append(out, ref(c))
		}
		return out
	}
	prepare := func(cs ...*resourceapi.ResourceClaim) int64 {
		before := syncs.Load()
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: refs(cs...)})
		require.NoError(t, err)
		for _, c := range cs {
			r := resp.Claims[string(c.UID)]
			require.NotNil(t, r, c.Name)
			require.Empty(t, r.Error, c.Name)
			require.Len(t, r.Devices, 2, c.Name)
		}
		return syncs.Load() - before
	}
	unprepare := func(cs ...*resourceapi.ResourceClaim) int64 {
		before := syncs.Load()
		resp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: refs(cs...)})
		require.NoError(t, err)
		for _, c := range cs {
			require.Empty(t, resp.Claims[string(c.UID)].GetError(), c.Name)
		}
		return syncs.Load() - before
	}
	p1, p4 := prepare(one), prepare(four...)
	assert.Equal(t, p1, p4, "prepare: fsyncs of a call of one claim and of four")
	assert.EqualValues(t, 1, p1, "prepare: the checkpoint's fsync")
	assert.Zero(t, prepare(four...), "prepared again, nothing changed: nothing saved")
	u1, u4 := unprepare(one), unprepare(four...)
	assert.Equal(t, u1, u4, "unprepare: fsyncs of a call of one claim and of four")
	assert.EqualValues(t, 1, u1, "unprepare: the checkpoint's fsync")
	t.Logf("fsyncs per call: prepare %d (1 claim) %d (4 claims), unprepare %d, %d", p1, p4, u1, u4)
}

// TestCheckpointReadOnlyWhenChanged: a kubelet call reads the checkpoint
// file only when someone else changed it since the plugin last read or
// wrote it (the other plugin pod of a rolling update); then it reads it,
// and sees that pod's claim.
func TestCheckpointReadOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	dataDir, cdiDir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	var opens atomic.Int64
	mk := func(count bool) *driver.Plugin {
		root, err := sysfs.OpenCapture(p5)
		require.NoError(t, err)
		w, err := cdi.NewWriter(cdiDir, "dra.net")
		require.NoError(t, err)
		s := checkpoint.NewStore(dataDir)
		if count {
			s.Open = func(name string) (*os.File, error) { opens.Add(1); return os.Open(name) }
		}
		p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w, Store: s, BootID: bootA})
		require.NoError(t, err)
		_, err = p.Rescan(ctx)
		require.NoError(t, err)
		return p
	}
	p := mk(true)
	a := claim("a", "c3c3c3c3-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	b := claim("b", "c3c3c3c3-0000-0000-0000-000000000002", "efa-0000-50-00-0")
	thief := claim("thief", "c3c3c3c3-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	prepare := func(p *driver.Plugin, c *resourceapi.ResourceClaim) error {
		res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		require.NoError(t, err)
		return res[c.UID].Err
	}
	reads := func(f func()) int64 {
		before := opens.Load()
		f()
		return opens.Load() - before
	}
	assert.Zero(t, reads(func() { require.NoError(t, prepare(p, a)) }), "no checkpoint yet, none read")
	assert.Zero(t, reads(func() { require.NoError(t, prepare(p, a)) }), "the checkpoint this plugin wrote: not read")
	assert.Zero(t, reads(func() {
		_, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, UID: a.UID}})
		require.NoError(t, err)
	}))
	assert.Zero(t, reads(func() { require.NoError(t, prepare(p, a)) }))

	// The other pod of a rolling update prepares b: the next call reads the
	// checkpoint, once, and refuses b's EFA to another claim.
	other := mk(false)
	require.NoError(t, prepare(other, b))
	assert.EqualValues(t, 1, reads(func() {
		assert.ErrorContains(t, prepare(p, thief), "already prepared for claim "+b.Namespace+"/"+b.Name+" ("+string(b.UID)+")")
	}))
	assert.Zero(t, reads(func() {
		assert.ErrorContains(t, prepare(p, thief), "already prepared for claim "+b.Namespace+"/"+b.Name+" ("+string(b.UID)+")")
	}))
	assert.Equal(t, []string{string(a.UID), string(b.UID)}, p.Prepared())
}

// TestPrepareBatch: a call's claims are saved together, with one fsync:
// they see each other before the save (two claims of a call that want one
// EFA get it once), and when the save fails none of them is prepared, the
// state before the call stands and their specs are gone again.
func TestPrepareBatch(t *testing.T) {
	t.Parallel()
	root := mustCapture(t)
	cdiDir, dataDir := t.TempDir(), t.TempDir()
	var syncs atomic.Int64
	var fail atomic.Bool
	count := func(*os.File) error {
		syncs.Add(1)
		if fail.Load() {
			return errors.New("no space left on device")
		}
		return nil
	}
	w, err := cdi.NewWriter(cdiDir, "dra.net")
	require.NoError(t, err)
	w.Sync = count
	s := checkpoint.NewStore(dataDir)
	s.Sync = count
	ctx := context.Background()
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w, Store: s, BootID: bootA})
	require.NoError(t, err)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	a := claim("a", "d4d4d4d4-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	b := claim("b", "d4d4d4d4-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
	c := claim("c", "d4d4d4d4-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	d := claim("d", "d4d4d4d4-0000-0000-0000-000000000004", "efa-0000-51-00-0")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a, b, c})
	require.NoError(t, err)
	require.NoError(t, res[a.UID].Err)
	assert.ErrorContains(t, res[b.UID].Err, "already prepared for claim "+a.Namespace+"/"+a.Name+" ("+string(a.UID)+")")
	require.NoError(t, res[c.UID].Err)
	assert.Equal(t, []string{string(a.UID), string(c.UID)}, p.Prepared())
	assert.EqualValues(t, 1, syncs.Load(), "one save for the call")
	_, err = p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}})
	require.NoError(t, err)
	before := syncs.Load()

	// The disk fails the fsync: the save is not made.
	fail.Store(true)
	res, err = p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c, d})
	require.NoError(t, err)
	for _, x := range []*resourceapi.ResourceClaim{c, d} {
		assert.ErrorContains(t, res[x.UID].Err, "no space left on device", x.Name)
		assert.Empty(t, res[x.UID].Devices, x.Name)
		ok, err := w.Exists(string(x.UID))
		require.NoError(t, err)
		assert.False(t, ok, "%s: not recorded, so no spec", x.Name)
	}
	assert.Equal(t, []string{string(a.UID)}, p.Prepared(), "the state before the call")
	assert.Equal(t, before+1, syncs.Load(), "one save tried")

	// The disk is back: both prepare, in one save.
	fail.Store(false)
	res, err = p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c, d})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	require.NoError(t, res[d.UID].Err)
	assert.Equal(t, []string{string(a.UID), string(c.UID), string(d.UID)}, p.Prepared())
	assert.Equal(t, before+2, syncs.Load())
	ok, err := w.Exists(string(d.UID))
	require.NoError(t, err)
	assert.True(t, ok)
}

func mustCapture(t *testing.T) *sysfs.MemFS {
	t.Helper()
	r, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	return r.ReadLinkFS.(*sysfs.MemFS)
}
