package driver_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// TestEFAMetricsClaimLabels: after Prepare, the EFAs of a claim carry its
// namespace, name and UID, those of a prepared group device the group's
// claim; after Unprepare the labels are empty again. The adapter's wiring:
// the exporter (driver/metrics, whose own tests hold the rest) reads its
// targets from the claim state's committed claims on the last snapshot.
func TestEFAMetricsClaimLabels(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node, Groups: resources.GroupsMixed},
		SysfsRoot: root, CDI: w, Store: checkpoint.NewStore(t.TempDir()), BootID: bootA})
	require.NoError(t, err)
	p.EFAMetrics().CacheFor = 0
	_, err = p.Rescan(ctx)
	require.NoError(t, err)

	single := claim("single", "a0000000-0000-0000-0000-000000000001", "efa-0000-60-00-0")
	group := claim("group", "a0000000-0000-0000-0000-000000000002", "efa-group-pci0000-44")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{single, group})
	require.NoError(t, err)
	require.NoError(t, res[single.UID].Err)
	require.NoError(t, res[group.UID].Err)

	owner := func(ss []drivertest.Series, dev string) [3]string {
		f := drivertest.Find(ss, "efakit_efa_tx_bytes_total", map[string]string{"dra_device": dev})
		require.Len(t, f, 1, dev)
		return [3]string{f[0].Labels["claim_namespace"], f[0].Labels["claim_name"], f[0].Labels["claim_uid"]}
	}
	ss := drivertest.Gather(t, p.Registry())
	assert.Equal(t, [3]string{"default", "single", string(single.UID)}, owner(ss, "efa-0000-60-00-0"))
	for _, m := range []string{"efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0"} {
		assert.Equal(t, [3]string{"default", "group", string(group.UID)}, owner(ss, m), m)
	}
	assert.Equal(t, [3]string{}, owner(ss, "efa-0000-61-00-0"), "free")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_port_active", map[string]string{"claim_name": "group"}), 4, "gauges carry the claim too")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 32, "group devices are no series of their own")

	u, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: single.UID}, {UID: group.UID}})
	require.NoError(t, err)
	require.NoError(t, u[single.UID])
	require.NoError(t, u[group.UID])
	ss = drivertest.Gather(t, p.Registry())
	for _, s := range drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil) {
		assert.Empty(t, s.Labels["claim_uid"], s.Labels["dra_device"])
	}
}
