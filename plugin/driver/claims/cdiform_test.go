package claims_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

// TestSpecOfAnEarlierForm: a claim prepared by an efakit that gave the
// kubelet one CDI device per request (its checkpoint names that ID, its
// spec has that device only). Its containers start with that ID, so the
// spec keeps it; the load adds a CDI device per allocated device, the IDs
// it answers a repeated prepare with. A claim prepared now has those only.
func TestSpecOfAnEarlierForm(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	old := claim("old", "a1111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	uid := string(old.UID)
	w, err := cdi.NewWriter(d.cdi, "dra.net")
	require.NoError(t, err)
	efas := []cdi.Device{{Name: "rdmap79s0", Uverbs: "uverbs0", Major: 231, Minor: 192}, {Name: "rdmap80s0", Uverbs: "uverbs1", Major: 231, Minor: 193}}
	ids, err := w.Write(uid, map[string]cdi.Request{"efa": {Devices: efas}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"efa": "dra.net/efa=" + uid + "-efa"}, ids)
	st := &checkpoint.State{Version: checkpoint.Version, BootID: bootA, Claims: map[string]checkpoint.Claim{uid: {
		UID: uid, Namespace: "default", Name: "old", CDIDeviceIDs: ids,
		Devices: []checkpoint.PreparedDevice{
			{Request: "efa", Pool: node, Device: "efa-0000-4f-00-0", RDMAName: "rdmap79s0", Uverbs: "uverbs0", PCIAddress: "0000:4f:00.0", Major: 231, Minor: 192},
			{Request: "efa", Pool: node, Device: "efa-0000-50-00-0", RDMAName: "rdmap80s0", Uverbs: "uverbs1", PCIAddress: "0000:50:00.0", Major: 231, Minor: 193},
		},
	}}}
	require.NoError(t, checkpoint.NewStore(d.data).Save(st))

	n := startOn(t, capture(t), d)
	w = n.files.CDI
	spec, err := w.Load(uid)
	require.NoError(t, err)
	var names []string
	for _, dev := range spec.Devices {
		names = append(names, dev.Name)
	}
	assert.Equal(t, []string{uid + "-efa", uid + "-efa_efa-0000-4f-00-0", uid + "-efa_efa-0000-50-00-0"}, names,
		"the kubelet's ID kept, one per allocated device added")
	r := n.prepareOne(old)
	require.NoError(t, r.Err)
	require.Len(t, r.Devices, 2)
	assert.Equal(t, []string{"dra.net/efa=" + uid + "-efa_efa-0000-50-00-0"}, r.Devices[1].CDIDeviceIDs)

	// A claim prepared now: a CDI device per allocated device, no other,
	// and no request ID in the checkpoint.
	now := claim("now", "b2222222-2222-2222-2222-222222222222", "efa-0000-51-00-0", "efa-0000-52-00-0")
	require.NoError(t, n.prepareOne(now).Err)
	spec, err = w.Load(string(now.UID))
	require.NoError(t, err)
	require.Len(t, spec.Devices, 2)
	assert.Equal(t, string(now.UID)+"-efa_efa-0000-51-00-0", spec.Devices[0].Name)
	saved, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Empty(t, saved.Claims[string(now.UID)].CDIDeviceIDs)
	assert.Equal(t, ids, saved.Claims[uid].CDIDeviceIDs, "the earlier claim keeps its ID")
	u := n.unprepare(old, now)
	require.NoError(t, u[old.UID])
	require.NoError(t, u[now.UID])
}
