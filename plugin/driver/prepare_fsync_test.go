package driver_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
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
