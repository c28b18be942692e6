package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// scrape reads the real plugin's /metrics: each series of the metric, as
// its labels with the value under "".
func (n *realNode) scrape(t *testing.T, metric string) []map[string]string {
	t.Helper()
	resp, err := http.Get(n.PluginHTTP + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m, err := harness.ParseMetrics(resp.Body)
	require.NoError(t, err)
	var out []map[string]string
	for _, s := range m[metric] {
		l := map[string]string{"": model.SampleValue(s.Value).String()}
		for k, v := range s.Labels {
			l[k] = v
		}
		out = append(out, l)
	}
	return out
}

// checkClaimMetrics runs a pod with one EFA through the real kubelet and
// reads the plugin's /metrics: the allocated EFA's series carry the
// claim's namespace, name and UID, every other EFA's carry none, and
// once the pod is gone (the claim unprepared) the labels are empty again.
func (n *realNode) checkClaimMetrics(t *testing.T) {
	_, claims := n.run(t, n.PrinterPod("metrics", harness.TemplateClaim("efa", "single-efa-claim")))
	cl := claimsOf(claims)
	require.Len(t, cl, 1)
	var dev string
	for _, r := range cl[0].Status.Allocation.Devices.Results {
		if r.Driver == resources.DefaultDriverName {
			dev = r.Device
		}
	}
	require.NotEmpty(t, dev)
	claimOf := func(s map[string]string) [3]string {
		return [3]string{s["claim_namespace"], s["claim_name"], s["claim_uid"]}
	}
	want := [3]string{cl[0].Namespace, cl[0].Name, string(cl[0].UID)}
	// A scrape may be served from a read made before the prepare (the
	// collector caches one read for a scrape interval).
	var last []map[string]string
	harness.Eventually(t, func() bool {
		last = n.scrape(t, "efakit_efa_tx_bytes_total")
		for _, s := range last {
			if s["dra_device"] == dev {
				return claimOf(s) == want
			}
		}
		return false
	}, 30*time.Second, 500*time.Millisecond, func() string { return fmt.Sprintf("the claim's labels on %s; last scrape: %v", dev, last) })
	require.Len(t, last, 32, "one tx_bytes series per EFA port of the p5")
	for _, s := range last {
		if s["dra_device"] != dev {
			assert.Equal(t, [3]string{}, claimOf(s), "EFA %s is not prepared", s["dra_device"])
		} else {
			assert.Regexp(t, `^rdmap\d+s\d+$`, s["device"])
			assert.NotEmpty(t, s["pcie_root"])
			assert.Equal(t, "1", s["port"])
		}
	}
	active := n.scrape(t, "efakit_efa_port_active")
	found := false
	for _, s := range active {
		if s["dra_device"] == dev {
			found = true
			assert.Equal(t, want, claimOf(s))
			assert.Equal(t, "1", s[""], "the port is ACTIVE")
		}
	}
	assert.True(t, found, "port state of %s", dev)

	n.deletePod(t, "metrics")
	require.Eventually(t, func() bool {
		for _, s := range n.scrape(t, "efakit_efa_tx_bytes_total") {
			if s["dra_device"] == dev {
				return claimOf(s) == [3]string{}
			}
		}
		return false
	}, 60*time.Second, 500*time.Millisecond, "the claim's labels gone from %s after unprepare", dev)
}
