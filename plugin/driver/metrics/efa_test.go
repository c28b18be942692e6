package metrics_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/metrics"
)

// TestEFAMetricsChangeBetweenReads: a scrape after the cache interval
// reads the counters again and gives their new values, with the labels of
// the EFA; port state and link rate are gauges; a counter the driver does
// not have (no retransmit counters on p5's efa) is absent, not 0.
func TestEFAMetricsChangeBetweenReads(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(p5With(t, map[string]string{"ports/1/hw_counters/tx_bytes": "1000\n", "hw_counters/keep_alive_rcvd": "7\n"}))
	e, reg := newEFA(t, s, nil)
	now := time.Unix(1000, 0)
	e.Now = func() time.Time { return now }

	ss := drivertest.Gather(t, reg)
	port := map[string]string{"device": "rdmap79s0", "port": "1", "pci_address": "0000:4f:00.0",
		"pcie_root": "pci0000:44", "dra_device": "efa-0000-4f-00-0", "claim_namespace": "", "claim_name": "", "claim_uid": ""}
	assert.Equal(t, 1000.0, drivertest.One(t, ss, "efakit_efa_tx_bytes_total", port))
	assert.Equal(t, 7.0, drivertest.One(t, ss, "efakit_efa_keep_alive_received_total", efa0))
	assert.Equal(t, 1.0, drivertest.One(t, ss, "efakit_efa_port_active", port))
	assert.Equal(t, 100e9/8, drivertest.One(t, ss, "efakit_efa_port_rate_bytes_per_second", port))
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_retransmitted_bytes_total", nil), "p5's efa has no retransmit counters")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 32, "one series per EFA")
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_other_total", nil), "lifespan is not a counter")
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_port_other_total", nil))

	s.cur.Store(p5With(t, map[string]string{"ports/1/hw_counters/tx_bytes": "5000\n", "hw_counters/keep_alive_rcvd": "9\n", "ports/1/state": "1: DOWN\n"}))
	now = now.Add(metrics.DefaultEFACacheFor)
	ss = drivertest.Gather(t, reg)
	assert.Equal(t, 5000.0, drivertest.One(t, ss, "efakit_efa_tx_bytes_total", port))
	assert.Equal(t, 9.0, drivertest.One(t, ss, "efakit_efa_keep_alive_received_total", efa0))
	assert.Equal(t, 0.0, drivertest.One(t, ss, "efakit_efa_port_active", port))
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
	_, reg := newEFA(t, p5With(t, files), nil)
	ss := drivertest.Gather(t, reg)
	names := map[float64]string{}
	for _, s := range ss {
		if s.Labels["device"] == "rdmap79s0" && strings.HasPrefix(s.Name, "efakit_efa_") && strings.HasSuffix(s.Name, "_total") {
			require.NotContains(t, names, s.Value, "%s and %s", names[s.Value], s.Name)
			names[s.Value] = s.Name
		}
	}
	for i, c := range efa.KnownCounters() {
		name, ok := names[float64(100+i)]
		if assert.True(t, ok, c.Name) {
			assert.NotContains(t, name, "other", c.Name)
			_, hasPort := drivertest.Find(ss, name, efa0)[0].Labels["port"]
			assert.Equal(t, c.Port, hasPort, "%s: port label", c.Name)
		}
	}
	assert.Equal(t, 3.0, drivertest.One(t, ss, "efakit_efa_other_total", map[string]string{"device": "rdmap79s0", "counter": "brand_new"}))
	assert.Equal(t, 4.0, drivertest.One(t, ss, "efakit_efa_port_other_total", map[string]string{"device": "rdmap79s0", "counter": "newer_port_thing", "port": "1"}))
	assert.Len(t, drivertest.Find(ss, "efakit_efa_other_total", nil), 1)
	assert.Len(t, drivertest.Find(ss, "efakit_efa_port_other_total", nil), 1)
}

// TestEFAMetricsBadFiles: a counter that does not parse and a rate that
// cannot be read are absent (never 0) and counted as read errors of their
// EFA; the EFA's other counters and the other EFAs are there.
func TestEFAMetricsBadFiles(t *testing.T) {
	t.Parallel()
	fsys := p5With(t, map[string]string{"ports/1/hw_counters/rx_bytes": "lots\n", "ports/1/rate": dropFile})
	_, reg := newEFA(t, fsys, nil)
	ss := drivertest.Gather(t, reg)
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_rx_bytes_total", efa0))
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_port_rate_bytes_per_second", efa0))
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", efa0), 1)
	assert.Len(t, drivertest.Find(ss, "efakit_efa_port_active", efa0), 1)
	assert.Len(t, drivertest.Find(ss, "efakit_efa_rx_bytes_total", nil), 31)
	assert.Equal(t, 2.0, drivertest.One(t, ss, "efakit_efa_read_errors_total", efa0))
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_read_errors_total", map[string]string{"device": "rdmap80s0"}))
}

// TestEFAMetricsClaimLabels: the claim a target names labels every series
// of its EFA, gauges included, and the others are free; new targets (a
// prepare, an unprepare) are read at once, within the cache interval too.
// Which EFAs a claim holds is the claim state's (claims.State.Targets);
// the root package's TestEFAMetricsClaimLabels prepares real claims.
func TestEFAMetricsClaimLabels(t *testing.T) {
	t.Parallel()
	fsys := p5With(t, nil)
	free := targets(t, fsys)
	list := &targetList{ts: free}
	e, reg := newEFA(t, fsys, list)
	now := time.Unix(1000, 0)
	e.Now = func() time.Time { return now }
	owner := func(ss []drivertest.Series, dev string) [3]string {
		f := drivertest.Find(ss, "efakit_efa_tx_bytes_total", map[string]string{"dra_device": dev})
		require.Len(t, f, 1, dev)
		return [3]string{f[0].Labels["claim_namespace"], f[0].Labels["claim_name"], f[0].Labels["claim_uid"]}
	}
	assert.Equal(t, [3]string{}, owner(drivertest.Gather(t, reg), "efa-0000-4f-00-0"))

	held := append([]metrics.Target(nil), free...)
	for i := range held {
		if held[i].DRADevice == "efa-0000-4f-00-0" || held[i].DRADevice == "efa-0000-50-00-0" {
			held[i].ClaimNamespace, held[i].ClaimName, held[i].ClaimUID = "default", "c", "uid-1"
		}
	}
	list.set(held)
	ss := drivertest.Gather(t, reg)
	for _, d := range []string{"efa-0000-4f-00-0", "efa-0000-50-00-0"} {
		assert.Equal(t, [3]string{"default", "c", "uid-1"}, owner(ss, d), d)
	}
	assert.Equal(t, [3]string{}, owner(ss, "efa-0000-51-00-0"), "free")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_port_active", map[string]string{"claim_name": "c"}), 2, "gauges carry the claim too")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 32)

	list.set(free)
	for _, s := range drivertest.Find(drivertest.Gather(t, reg), "efakit_efa_tx_bytes_total", nil) {
		assert.Empty(t, s.Labels["claim_uid"], s.Labels["dra_device"])
	}
}

// variableLabels finds a description's variable labels in its String.
var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// populate gives every vector among the plugin's own collectors one
// series, so that a gather holds each of their families.
func populate(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	for _, c := range m.Own() {
		descs := make(chan *prometheus.Desc, 8)
		c.Describe(descs)
		close(descs)
		d := <-descs
		require.NotNil(t, d)
		s := variableLabels.FindStringSubmatch(d.String())
		require.NotNil(t, s, d.String())
		var values []string
		if s[1] != "" {
			for range strings.Split(s[1], ",") {
				values = append(values, "x")
			}
		}
		switch v := c.(type) {
		case *prometheus.CounterVec:
			v.WithLabelValues(values...).Inc()
		case *prometheus.GaugeVec:
			v.WithLabelValues(values...).Set(1)
		case *prometheus.HistogramVec:
			v.WithLabelValues(values...).Observe(0.01)
		}
	}
}

// registry is the plugin's whole registry (metrics.New's, with the EFA
// exporter the plugin adds) over the p5 fixture with the counters files
// gives, every vector of the plugin's own with a series, and the EFA at
// 4f:00.0 prepared for claim default/c.
func registry(t *testing.T, files map[string]string) *prometheus.Registry {
	t.Helper()
	m := metrics.New()
	populate(t, m)
	fsys := p5With(t, files)
	ts := targets(t, fsys)
	for i := range ts {
		if ts[i].DRADevice == "efa-0000-4f-00-0" {
			ts[i].ClaimNamespace, ts[i].ClaimName, ts[i].ClaimUID = "default", "c", "b0000000-0000-0000-0000-000000000001"
		}
	}
	m.Registry.MustRegister(metrics.NewEFA(fsys, func() []metrics.Target { return ts }))
	return m.Registry
}

// TestEFAMetricsLint: the whole registry, EFA metrics of a prepared claim
// included, passes the Prometheus lint.
func TestEFAMetricsLint(t *testing.T) {
	t.Parallel()
	reg := registry(t, map[string]string{"hw_counters/brand_new": "3\n", "ports/1/hw_counters/newer_port_thing": "4\n"})
	ss := drivertest.Gather(t, reg)
	require.NotEmpty(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", map[string]string{"claim_name": "c"}))
	require.NotEmpty(t, drivertest.Find(ss, "efakit_efa_other_total", nil))
	require.NotEmpty(t, drivertest.Find(ss, "efakit_plugin_standing_aside", nil), "the vectors have series")
	// promlint is what testutil.GatherAndLint runs; testutil itself would
	// add a module to go.mod for its diffs.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}
