package claims_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// These tests prepare EFAs shared by capacity (--sharing=capacity): how
// prepare holds the shares of one EFA apart from a claim that wants it
// alone, and what the EFA exporter is told of the claims that hold them.

// share is one allocation result of an EFA: with an id, a share of an EFA
// shared by capacity consuming shares of it; without, the EFA alone.
type share struct {
	request, device, id string
	shares              int64
}

// sharedClaim is a claim the scheduler allocated the given shares to.
func sharedClaim(name, uid string, shares ...share) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, s := range shares {
		r := resourceapi.DeviceRequestAllocationResult{Request: s.request, Driver: "dra.net", Pool: node, Device: s.device}
		if s.id != "" {
			id := types.UID(s.id)
			r.ShareID = &id
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{resources.CapacityShares: *resource.NewQuantity(s.shares, resource.DecimalSI)}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

const (
	shareA = "5a5a5a5a-0000-4000-8000-00000000000a"
	shareB = "5a5a5a5a-0000-4000-8000-00000000000b"
)

// sharing sets a setup's --sharing=capacity with shares per EFA.
func sharing(shares int64) func(*setup) {
	return func(s *setup) { s.cfg.Sharing, s.cfg.Shares = resources.SharingCapacity, shares }
}

// TestSharingPrepareShares: two independent claims holding shares of one
// EFA, on a node with --sharing=capacity, are both prepared, each with its
// own CDI spec naming the EFA's one uverbs node and each result device
// carrying its share back to the kubelet; the checkpoint records each
// share. Unpreparing one leaves the other prepared, spec and all.
func TestSharingPrepareShares(t *testing.T) {
	t.Parallel()
	const dev = "efa-0000-4f-00-0"
	a := sharedClaim("share-a", "5a000000-0000-0000-0000-000000000001", share{"efa", dev, shareA, 1})
	b := sharedClaim("share-b", "5a000000-0000-0000-0000-000000000002", share{"efa", dev, shareB, 3})
	d := newDirs(t)
	n := startOn(t, capture(t), d, sharing(4))
	w := n.files.CDI

	uverbs0 := []string{"/dev/infiniband/uverbs0 231:192"}
	for c, id := range map[*resourceapi.ResourceClaim]string{a: shareA, b: shareB} {
		r := n.prepareOne(c)
		require.NoError(t, r.Err, c.Name)
		require.Len(t, r.Devices, 1, c.Name)
		assert.Equal(t, dev, r.Devices[0].DeviceName)
		require.NotNil(t, r.Devices[0].ShareID, c.Name)
		assert.Equal(t, id, string(*r.Devices[0].ShareID), "%s: the kubelet gets the share back", c.Name)
		assert.Equal(t, uverbs0, specNodesOf(t, w, c.UID), "%s: its own spec, the EFA's node", c.Name)
	}
	st, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Equal(t, shareA, st.Claims[string(a.UID)].Devices[0].ShareID)
	assert.Equal(t, int64(1), st.Claims[string(a.UID)].Devices[0].Shares)
	assert.Equal(t, shareB, st.Claims[string(b.UID)].Devices[0].ShareID)
	assert.Equal(t, int64(3), st.Claims[string(b.UID)].Devices[0].Shares)
	raw, err := os.ReadFile(filepath.Join(d.data, checkpoint.FileName))
	require.NoError(t, err)
	var v struct{ Version int }
	require.NoError(t, json.Unmarshal(raw, &v))
	assert.Equal(t, 3, v.Version, "the file is version 3")

	require.NoError(t, n.unprepare(a)[a.UID])
	ok, err := w.Exists(string(a.UID))
	require.NoError(t, err)
	assert.False(t, ok, "a's spec removed")
	assert.Equal(t, uverbs0, specNodesOf(t, w, b.UID), "b's spec stays")
	again := n.prepareOne(b)
	require.NoError(t, again.Err)
	require.NotNil(t, again.Devices[0].ShareID)
	assert.Equal(t, shareB, string(*again.Devices[0].ShareID))
}

// TestSharingRefusesMix: an EFA held as a share is not prepared for a
// claim that wants it alone, and one held alone not for a share, each
// refusal naming the claim that holds it; once the last share is
// unprepared, the claim that wants the EFA alone gets it.
func TestSharingRefusesMix(t *testing.T) {
	t.Parallel()
	held := sharedClaim("held", "5b000000-0000-0000-0000-000000000001", share{"efa", "efa-0000-4f-00-0", shareA, 1})
	alone := claim("alone", "5b000000-0000-0000-0000-000000000002", "efa-0000-4f-00-0")
	excl := claim("excl", "5b000000-0000-0000-0000-000000000003", "efa-0000-50-00-0")
	late := sharedClaim("late", "5b000000-0000-0000-0000-000000000004", share{"efa", "efa-0000-50-00-0", shareB, 1})
	n := startOn(t, capture(t), newDirs(t), sharing(0))

	require.NoError(t, n.prepareOne(held).Err)
	assert.ErrorContains(t, n.prepareOne(alone).Err,
		"device efa-0000-4f-00-0 is already prepared for claim default/held ("+string(held.UID)+") as a share: a claim that holds it alone must wait until every share is unprepared")
	require.NoError(t, n.prepareOne(excl).Err)
	assert.ErrorContains(t, n.prepareOne(late).Err,
		"device efa-0000-50-00-0 is already prepared for claim default/excl ("+string(excl.UID)+") alone: it cannot be shared")

	require.NoError(t, n.unprepare(held)[held.UID])
	assert.NoError(t, n.prepareOne(alone).Err, "no share left: the EFA is free")
}

// TestSharingMetricsLabels: an EFA shared by two claims carries both in its
// claim labels (Targets, as the EFA exporter scrapes them), comma-separated
// in UID order (not name order), so one series per EFA still says every
// claim that uses it; after one is unprepared, the other alone.
func TestSharingMetricsLabels(t *testing.T) {
	t.Parallel()
	root := capture(t)
	n := startOn(t, root, newDirs(t), sharing(0))
	exporter := metrics.NewEFA(root, func() []metrics.Target { return n.Targets(n.snap) })
	exporter.CacheFor = 0
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter)
	// zeta's UID sorts first.
	zeta := sharedClaim("zeta", "5c000000-0000-0000-0000-000000000001", share{"efa", "efa-0000-4f-00-0", shareA, 1})
	alpha := sharedClaim("alpha", "5c000000-0000-0000-0000-000000000002", share{"efa", "efa-0000-4f-00-0", shareB, 1})
	res := n.prepare(alpha, zeta)
	require.NoError(t, res[alpha.UID].Err)
	require.NoError(t, res[zeta.UID].Err)

	owner := func() [3]string {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var found []map[string]string
		for _, mf := range mfs {
			if mf.GetName() != "efakit_efa_tx_bytes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["dra_device"] == "efa-0000-4f-00-0" {
					found = append(found, labels)
				}
			}
		}
		require.Len(t, found, 1, "one series for the shared EFA")
		return [3]string{found[0]["claim_namespace"], found[0]["claim_name"], found[0]["claim_uid"]}
	}
	assert.Equal(t, [3]string{"default,default", "zeta,alpha", string(zeta.UID) + "," + string(alpha.UID)}, owner())

	require.NoError(t, n.unprepare(zeta)[zeta.UID])
	assert.Equal(t, [3]string{"default", "alpha", string(alpha.UID)}, owner())
}
