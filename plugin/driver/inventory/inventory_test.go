package inventory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

const p5 = "../../../testdata/sysfs/p5.48xlarge.sysfs"

func scan(t *testing.T) *topology.Topology {
	t.Helper()
	root, err := sysfs.Open(p5)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	return topo
}

// TestBuild: a p5's snapshot holds its 32 EFAs with their RDMA and uverbs
// devices, all healthy; in the exclusive group mode, a group of four per
// PCIe root too, each as healthy as its members.
func TestBuild(t *testing.T) {
	t.Parallel()
	topo := scan(t)
	snap, changes, err := inventory.Build(topo, nil, resources.Config{NodeName: "n"}, inventory.Empty(), nil)
	require.NoError(t, err)
	assert.Empty(t, changes, "healthy at the first scan: no change")
	assert.Len(t, snap.Devices, 32)
	d := snap.Devices["efa-0000-4f-00-0"]
	assert.Equal(t, "rdmap79s0", d.RDMAName)
	assert.Equal(t, "uverbs0", d.Uverbs)
	assert.Equal(t, [2]uint32{231, 192}, [2]uint32{d.Major, d.Minor})
	assert.Empty(t, snap.Groups)
	for name, h := range snap.Health {
		assert.Equal(t, health.Healthy, h.Grade, name)
	}

	groups, _, err := inventory.Build(topo, nil, resources.Config{NodeName: "n", Groups: resources.GroupsExclusive}, inventory.Empty(), nil)
	require.NoError(t, err)
	assert.Len(t, groups.Groups, 8)
	for name, members := range groups.Groups {
		assert.Len(t, members, 4, name)
		assert.True(t, groups.IsGroup(name))
		assert.Equal(t, health.Healthy, groups.Health[name].Grade)
	}
	assert.False(t, groups.IsGroup("efa-0000-4f-00-0"))
}

// TestGoneIsUnhealthy: an EFA that leaves sysfs is unhealthy ("gone") in
// the next snapshot, a change, and so is its group; the change names its
// RDMA device from the snapshot it was in.
func TestGoneIsUnhealthy(t *testing.T) {
	t.Parallel()
	topo := scan(t)
	cfg := resources.Config{NodeName: "n", Groups: resources.GroupsExclusive}
	first, _, err := inventory.Build(topo, nil, cfg, inventory.Empty(), nil)
	require.NoError(t, err)

	var kept []*topology.Device
	for _, d := range topo.Devices {
		if d.Name != "rdmap79s0" {
			kept = append(kept, d)
		}
	}
	without := &topology.Topology{Devices: kept, Host: topo.Host, Table: topo.Table, InactiveEFAs: topo.InactiveEFAs}
	next, changes, err := inventory.Build(without, nil, cfg, first, nil)
	require.NoError(t, err)
	gone := next.Health["efa-0000-4f-00-0"]
	assert.Equal(t, health.Unhealthy, gone.Grade)
	assert.Equal(t, "gone", gone.Reason)
	var changed []string
	for _, c := range changes {
		changed = append(changed, c.Device)
		if c.Device == "efa-0000-4f-00-0" {
			assert.Equal(t, "rdmap79s0", c.RDMAName, "named from the snapshot it was in")
		}
	}
	assert.Contains(t, changed, "efa-0000-4f-00-0")
	var group string
	for name, ms := range first.Groups {
		for _, m := range ms {
			if m == "efa-0000-4f-00-0" {
				group = name
			}
		}
	}
	require.NotEmpty(t, group)
	assert.Equal(t, health.Unhealthy, next.Health[group].Grade, "the group of a gone member")
	assert.Contains(t, next.HealthMembers[group], "efa-0000-4f-00-0", "counted until it returns")
}

// TestStandAside: a snapshot standing aside publishes an empty driver
// (its slices withdrawn); before the first scan nothing is published.
func TestStandAside(t *testing.T) {
	t.Parallel()
	cfg := resources.Config{NodeName: "n"}
	res, _ := inventory.Empty().Published(cfg, resources.TaintSupport{})
	assert.Nil(t, res, "nothing before the first scan")
	snap, _, err := inventory.Build(scan(t), nil, cfg, inventory.Empty(), nil)
	require.NoError(t, err)
	res, _ = snap.Published(cfg, resources.TaintSupport{})
	require.NotNil(t, res)
	assert.Len(t, res.Pools, 1)
	aside := snap.WithStandAside("another owner")
	res, _ = aside.Published(cfg, resources.TaintSupport{})
	require.NotNil(t, res)
	assert.Empty(t, res.Pools, "standing aside withdraws the slices")
	assert.Empty(t, snap.StandAside, "the original is untouched")
}

// TestHolderNext: Next is closed by the Store after it, never before.
func TestHolderNext(t *testing.T) {
	t.Parallel()
	h := inventory.NewHolder()
	assert.NotNil(t, h.Load())
	next := h.Next()
	select {
	case <-next:
		t.Fatal("closed before a Store")
	default:
	}
	s := inventory.Empty()
	h.Store(s)
	select {
	case <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed by the Store")
	}
	assert.Same(t, s, h.Load())
}
