package publishing_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/efakit/efakit/efa/health"
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
func edit(t testing.TB, f func(e *sysfs.Entry) bool) *sysfs.MemFS {
	t.Helper()
	r, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	var es []sysfs.Entry
	for _, e := range r.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if f(&e) {
			es = append(es, e)
		}
	}
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	return m
}

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

// recorder is a Target that keeps what it was given.
type recorder struct {
	mu    sync.Mutex
	calls []resourceslice.DriverResources
}

func (r *recorder) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, *res.DeepCopy())
	return nil
}

func (r *recorder) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.calls) }

// lastDevices are the devices of the last publish, by name.
func lastDevices(rec *recorder) map[string]resourceapi.Device {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[string]resourceapi.Device{}
	for _, pool := range rec.calls[len(rec.calls)-1].Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				out[d.Name] = d
			}
		}
	}
	return out
}

// testLogger records what is logged at the default verbosity.
func testLogger(t *testing.T) (context.Context, func() []ktesting.LogEntry) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func() []ktesting.LogEntry {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().Data()
	}
}

// kv is a log entry's key/value pairs as a map.
func kv(e ktesting.LogEntry) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
		out[fmt.Sprint(e.ParameterKVList[i])] = e.ParameterKVList[i+1]
	}
	return out
}

func entries(log []ktesting.LogEntry, msg string) []ktesting.LogEntry {
	var out []ktesting.LogEntry
	for _, e := range log {
		if e.Message == msg {
			out = append(out, e)
		}
	}
	return out
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
