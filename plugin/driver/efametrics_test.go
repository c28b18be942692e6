package driver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// ibDir is the RDMA device directory of the p5 fixture's EFA at 0000:4f:00.0.
const ibDir = "devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0/infiniband/rdmap79s0"

// series is one gathered sample.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

func gather(t *testing.T, g prometheus.Gatherer) []series {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var out []series
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{name: mf.GetName(), labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.value = m.GetGauge().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// find returns the samples of name whose labels include want.
func find(ss []series, name string, want map[string]string) []series {
	var out []series
	for _, s := range ss {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// one is the value of the one sample of name with labels want.
func one(t *testing.T, ss []series, name string, want map[string]string) float64 {
	t.Helper()
	f := find(ss, name, want)
	require.Len(t, f, 1, "%s%v", name, want)
	return f[0].value
}

// dropFile as a file's content in p5With drops the file.
const dropFile = "\x00drop"

// p5With is the p5 fixture with files of the EFA at 4f:00.0 set (path
// under ibDir -> content; nil drops the file) and added.
func p5With(t *testing.T, files map[string]string) *sysfs.MemFS {
	t.Helper()
	r, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	left := map[string]string{}
	for k, v := range files {
		left[k] = v
	}
	var es []sysfs.Entry
	for _, e := range r.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if rel, ok := strings.CutPrefix(e.Path, ibDir+"/"); ok {
			if v, ok := files[rel]; ok {
				delete(left, rel)
				if v == dropFile {
					continue
				}
				e.Data = []byte(v)
			}
		}
		es = append(es, e)
	}
	for rel, v := range left {
		es = append(es, sysfs.Entry{Path: ibDir + "/" + rel, Kind: sysfs.KindFile, Data: []byte(v)})
	}
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	return m
}

var efa0 = map[string]string{"device": "rdmap79s0"}

// TestEFAMetricsChangeBetweenReads: a scrape after the cache interval
// reads the counters again and gives their new values, with the labels of
// the EFA; port state and link rate are gauges; a counter the driver does
// not have (no retransmit counters on p5's efa) is absent, not 0.
func TestEFAMetricsChangeBetweenReads(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(p5With(t, map[string]string{"ports/1/hw_counters/tx_bytes": "1000\n", "hw_counters/keep_alive_rcvd": "7\n"}))
	p := newTestPlugin(t, s)
	now := time.Unix(1000, 0)
	p.EFAMetrics().Now = func() time.Time { return now }
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)

	ss := gather(t, p.Registry())
	port := map[string]string{"device": "rdmap79s0", "port": "1", "pci_address": "0000:4f:00.0",
		"pcie_root": "pci0000:44", "dra_device": "efa-0000-4f-00-0", "claim_namespace": "", "claim_name": "", "claim_uid": ""}
	assert.Equal(t, 1000.0, one(t, ss, "efakit_efa_tx_bytes_total", port))
	assert.Equal(t, 7.0, one(t, ss, "efakit_efa_keep_alive_received_total", efa0))
	assert.Equal(t, 1.0, one(t, ss, "efakit_efa_port_active", port))
	assert.Equal(t, 100e9/8, one(t, ss, "efakit_efa_port_rate_bytes_per_second", port))
	assert.Empty(t, find(ss, "efakit_efa_retransmitted_bytes_total", nil), "p5's efa has no retransmit counters")
	assert.Len(t, find(ss, "efakit_efa_tx_bytes_total", nil), 32, "one series per EFA")
	assert.Empty(t, find(ss, "efakit_efa_other_total", nil), "lifespan is not a counter")
	assert.Empty(t, find(ss, "efakit_efa_port_other_total", nil))

	s.cur.Store(p5With(t, map[string]string{"ports/1/hw_counters/tx_bytes": "5000\n", "hw_counters/keep_alive_rcvd": "9\n", "ports/1/state": "1: DOWN\n"}))
	now = now.Add(metrics.DefaultEFACacheFor)
	ss = gather(t, p.Registry())
	assert.Equal(t, 5000.0, one(t, ss, "efakit_efa_tx_bytes_total", port))
	assert.Equal(t, 9.0, one(t, ss, "efakit_efa_keep_alive_received_total", efa0))
	assert.Equal(t, 0.0, one(t, ss, "efakit_efa_port_active", port))
}

// TestEFAMetricsEveryCounter: every counter of the catalogue, each one on
// an EFA, gets a metric of its own (none falls to the generic one, no two
// share a name); one the catalogue does not know is kept under the generic
// metric with its file name; lifespan is none.
func TestEFAMetricsEveryCounter(t *testing.T) {
	t.Parallel()
	files := map[string]string{"hw_counters/brand_new": "3\n", "ports/1/hw_counters/newer_port_thing": "4\n"}
	for i, c := range efa.KnownCounters() {
		f := "hw_counters/" + c.Name
		if c.Port {
			f = "ports/1/hw_counters/" + c.Name
		}
		files[f] = fmt.Sprintf("%d\n", 100+i)
	}
	p := newTestPlugin(t, p5With(t, files))
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	ss := gather(t, p.Registry())
	names := map[float64]string{}
	for _, s := range ss {
		if s.labels["device"] == "rdmap79s0" && strings.HasPrefix(s.name, "efakit_efa_") && strings.HasSuffix(s.name, "_total") {
			require.NotContains(t, names, s.value, "%s and %s", names[s.value], s.name)
			names[s.value] = s.name
		}
	}
	for i, c := range efa.KnownCounters() {
		name, ok := names[float64(100+i)]
		if assert.True(t, ok, c.Name) {
			assert.NotContains(t, name, "other", c.Name)
			_, hasPort := find(ss, name, efa0)[0].labels["port"]
			assert.Equal(t, c.Port, hasPort, "%s: port label", c.Name)
		}
	}
	assert.Equal(t, 3.0, one(t, ss, "efakit_efa_other_total", map[string]string{"device": "rdmap79s0", "counter": "brand_new"}))
	assert.Equal(t, 4.0, one(t, ss, "efakit_efa_port_other_total", map[string]string{"device": "rdmap79s0", "counter": "newer_port_thing", "port": "1"}))
	assert.Len(t, find(ss, "efakit_efa_other_total", nil), 1)
	assert.Len(t, find(ss, "efakit_efa_port_other_total", nil), 1)
}

// TestEFAMetricsBadFiles: a counter that does not parse and a rate that
// cannot be read are absent (never 0) and counted as read errors of their
// EFA; the EFA's other counters and the other EFAs are there.
func TestEFAMetricsBadFiles(t *testing.T) {
	t.Parallel()
	p := newTestPlugin(t, p5With(t, map[string]string{"ports/1/hw_counters/rx_bytes": "lots\n", "ports/1/rate": dropFile}))
	_, _ = p.Rescan(context.Background()) // the scan reports the missing rate too
	ss := gather(t, p.Registry())
	assert.Empty(t, find(ss, "efakit_efa_rx_bytes_total", efa0))
	assert.Empty(t, find(ss, "efakit_efa_port_rate_bytes_per_second", efa0))
	assert.Len(t, find(ss, "efakit_efa_tx_bytes_total", efa0), 1)
	assert.Len(t, find(ss, "efakit_efa_port_active", efa0), 1)
	assert.Len(t, find(ss, "efakit_efa_rx_bytes_total", nil), 31)
	assert.Equal(t, 2.0, one(t, ss, "efakit_efa_read_errors_total", efa0))
	assert.Empty(t, find(ss, "efakit_efa_read_errors_total", map[string]string{"device": "rdmap80s0"}))
}

// TestEFAMetricsClaimLabels: after Prepare, the EFAs of a claim carry its
// namespace, name and UID, those of a prepared group device the group's
// claim; after Unprepare the labels are empty again.
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

	owner := func(ss []series, dev string) [3]string {
		f := find(ss, "efakit_efa_tx_bytes_total", map[string]string{"dra_device": dev})
		require.Len(t, f, 1, dev)
		return [3]string{f[0].labels["claim_namespace"], f[0].labels["claim_name"], f[0].labels["claim_uid"]}
	}
	ss := gather(t, p.Registry())
	assert.Equal(t, [3]string{"default", "single", string(single.UID)}, owner(ss, "efa-0000-60-00-0"))
	for _, m := range []string{"efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0"} {
		assert.Equal(t, [3]string{"default", "group", string(group.UID)}, owner(ss, m), m)
	}
	assert.Equal(t, [3]string{}, owner(ss, "efa-0000-61-00-0"), "free")
	assert.Len(t, find(ss, "efakit_efa_port_active", map[string]string{"claim_name": "group"}), 4, "gauges carry the claim too")
	assert.Len(t, find(ss, "efakit_efa_tx_bytes_total", nil), 32, "group devices are no series of their own")

	u, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: single.UID}, {UID: group.UID}})
	require.NoError(t, err)
	require.NoError(t, u[single.UID])
	require.NoError(t, u[group.UID])
	ss = gather(t, p.Registry())
	for _, s := range find(ss, "efakit_efa_tx_bytes_total", nil) {
		assert.Empty(t, s.labels["claim_uid"], s.labels["dra_device"])
	}
}

// TestEFAMetricsLint: the whole registry, EFA metrics of a prepared claim
// included, passes the Prometheus lint.
func TestEFAMetricsLint(t *testing.T) {
	t.Parallel()
	p := newTestPlugin(t, p5With(t, map[string]string{"hw_counters/brand_new": "3\n", "ports/1/hw_counters/newer_port_thing": "4\n"}))
	ctx := context.Background()
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	c := claim("c", "b0000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	ss := gather(t, p.Registry())
	require.NotEmpty(t, find(ss, "efakit_efa_tx_bytes_total", map[string]string{"claim_name": "c"}))
	require.NotEmpty(t, find(ss, "efakit_efa_other_total", nil))
	// promlint is what testutil.GatherAndLint runs; testutil itself would
	// add a module to go.mod for its diffs.
	mfs, err := p.Registry().Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}
