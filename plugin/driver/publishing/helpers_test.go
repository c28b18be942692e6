package publishing_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// p5 is the p5.48xlarge capture: 32 EFAs.
const p5 = "../../../testdata/sysfs/p5.48xlarge.sysfs"

const node = "node-1"

// edit returns the p5 fixture with f applied to each entry (false drops it).
func edit(t testing.TB, f func(e *sysfs.Entry) bool) *sysfs.MemFS { return drivertest.Edit(t, p5, f) }

// full is the p5 fixture as captured.
func full(t testing.TB) *sysfs.MemFS { return edit(t, func(*sysfs.Entry) bool { return true }) }

// portDown is the p5 fixture with the EFA at bus:00.0's port DOWN.
func portDown(t testing.TB, bus string) *sysfs.MemFS {
	return edit(t, func(e *sysfs.Entry) bool {
		if strings.Contains(e.Path, "0000:"+bus+":00.0/infiniband/") && strings.HasSuffix(e.Path, "/ports/1/state") {
			e.Data = []byte("1: DOWN\n")
		}
		return true
	})
}

// snapshot is the inventory a scan of fsys builds after prev (nil: the
// first scan), graded by verdicts (by device name) as the plugin's
// health checks grade it.
func snapshot(t testing.TB, fsys fs.FS, cfg resources.Config, prev *inventory.Snapshot, verdicts map[string]health.Verdict) *inventory.Snapshot {
	t.Helper()
	topo, scanErr := topology.Scan(fsys)
	require.NotNil(t, topo, "%v", scanErr)
	if prev == nil {
		prev = inventory.Empty()
	}
	s, _, _ := inventory.Build(topo, scanErr, cfg, prev, verdicts)
	return s
}

// newPublisher is a Publisher of cfg with its own metrics, changed by with.
func newPublisher(cfg resources.Config, with ...func(*publishing.PublisherOptions)) (*publishing.Publisher, *metrics.Metrics) {
	o := publishing.PublisherOptions{Config: cfg, Metrics: metrics.New()}
	for _, f := range with {
		f(&o)
	}
	return publishing.NewPublisher(o), o.Metrics
}

// value is a counter's or gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
