package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/test/e2e/harness"
)

// maxPluginRSS is the budget for the plugin's steady VmRSS on a p5: 35 MB.
const maxPluginRSS = 35_000_000

// procStatus reads the memory lines of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if fs := strings.Fields(v); len(fs) == 2 && fs[1] == "kB" {
			n, err := strconv.ParseInt(fs[0], 10, 64)
			require.NoError(t, err, "%s", sc.Text())
			out[k] = n << 10
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// pluginMetrics reads the plugin's /metrics: each unlabelled sample by name.
func pluginMetrics(n *harness.E2ENode) map[string]float64 {
	n.T.Helper()
	resp, err := http.Get(n.HTTP + "/metrics")
	require.NoError(n.T, err)
	defer resp.Body.Close()
	m, err := harness.ParseMetrics(resp.Body)
	require.NoError(n.T, err)
	out := map[string]float64{}
	for name, samples := range m {
		for _, s := range samples {
			if len(s.Labels) == 0 {
				out[name] = s.Value
			}
		}
	}
	return out
}

// TestPluginMemory runs the plugin binary, built as the image builds it, on
// a p5 (32 EFAs) against the real API server, with a kubelet's health
// stream open, and reads its /proc/PID/status once it is steady: it has
// published, given its start-up pages back, and done its periodic work
// (rescans, health reports, the API reads that check for another owner,
// garbage collections, /metrics scrapes) for a while. Its VmRSS must stay
// within 35 MB. The rescan and health intervals are 5 s (1 minute and 10 s
// by default) so that this takes seconds, not minutes.
func TestPluginMemory(t *testing.T) {
	c := harness.APIServer(t)
	bin, err := harness.PluginBinary() // as the image builds it
	require.NoError(t, err)
	// A directory, as /sys is on a node (a capture file would be held in
	// the plugin's heap: 1.4 MB for the p5's).
	f, err := os.Open(p5Fixture)
	require.NoError(t, err)
	entries, err := sysfs.ParseCapture(f)
	f.Close()
	require.NoError(t, err)
	sys := filepath.Join(t.TempDir(), "sys")
	require.NoError(t, sysfs.WriteDir(sys, entries))
	n := harness.NewE2ENode(t, c, "p5-memory", sys, resources.GroupsNone, func(n *harness.E2ENode) {
		n.Bin = bin
		n.Args = []string{"--rescan-interval", "5s", "--health-interval", "5s"}
	})
	n.Slices(32)
	pid := n.Proc.Process.Pid

	// The kubelet keeps the health stream open (on the DRA socket,
	// conns[1]); the plugin sends on it every health interval.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := drahealth.NewDRAResourceHealthClient(n.Conns[1]).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	require.NoError(t, err)
	var reports atomic.Int32
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
			reports.Add(1)
		}
	}()

	released := func() bool {
		b, _ := os.ReadFile(filepath.Join(n.Dir, "plugin.log"))
		return strings.Contains(string(b), "Gave start-up pages back to the kernel")
	}
	if !harness.Poll(released, 30*time.Second, 200*time.Millisecond) {
		t.Errorf("the plugin gives its start-up pages back after its first rescan; log:\n%s", n.Log())
		t.Log("measuring without it")
	}
	// Steady: after the release, at least three more rescans and two
	// collections (each touches the code and tables it needs again).
	m0 := pluginMetrics(n)
	require.Eventually(t, func() bool {
		m := pluginMetrics(n)
		return m["efakit_plugin_scan_seconds_count"] >= m0["efakit_plugin_scan_seconds_count"]+3 &&
			m["go_gc_duration_seconds_count"] >= m0["go_gc_duration_seconds_count"]+2
	}, 60*time.Second, 5*time.Second, "rescans and collections after the release")

	// Then ten seconds of samples, one a second.
	var peak map[string]int64
	for range 10 {
		time.Sleep(time.Second)
		if st := procStatus(t, pid); st["VmRSS"] > peak["VmRSS"] {
			peak = st
		}
	}
	m := pluginMetrics(n)
	mb := func(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }
	t.Logf("plugin steady on a p5: VmRSS %s (RssAnon %s, RssFile %s); VmHWM %s at start", mb(float64(peak["VmRSS"])),
		mb(float64(peak["RssAnon"])), mb(float64(peak["RssFile"])), mb(float64(peak["VmHWM"])))
	t.Logf("Go: heap live+garbage %s, heap in use %s, next GC %s, stacks %s, runtime total %s, limit %s",
		mb(m["go_memstats_heap_alloc_bytes"]), mb(m["go_memstats_heap_inuse_bytes"]), mb(m["go_memstats_next_gc_bytes"]),
		mb(m["go_memstats_stack_inuse_bytes"]), mb(m["go_memstats_sys_bytes"]-m["go_memstats_heap_released_bytes"]),
		mb(m["go_gc_gomemlimit_bytes"]))
	t.Logf("over %.0f s: %v collections (%.0f ms of pauses), %.2f s of CPU, %d scans, %d health reports",
		float64(time.Now().Unix())-m["process_start_time_seconds"], m["go_gc_duration_seconds_count"], m["go_gc_duration_seconds_sum"]*1000,
		m["process_cpu_seconds_total"], int(m["efakit_plugin_scan_seconds_count"]), reports.Load())
	assert.Positive(t, reports.Load(), "health reports on the stream")
	assert.LessOrEqual(t, peak["VmRSS"], int64(maxPluginRSS), "the plugin's steady VmRSS on a p5")
}
