package driver_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/plugin/driver"
)

// TestReadersDoNotWaitForPrepare holds a prepare inside its first fsync
// (the CDI spec's or the checkpoint's, both written while the prepare
// decides, under the claim state's lock) and asks /readyz, /metrics and
// the kubelet's health stream meanwhile, and makes a scan that publishes:
// all answer before the fsync is let go, so a slow disk holds up the
// kubelet's call and nothing else. /metrics carries the EFA exporter's series, whose targets
// come from the claim state. The timeout is only how long the test waits
// before it calls a reader stuck.
func TestReadersDoNotWaitForPrepare(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	c := claim("held", "22222222-2222-2222-2222-222222222222", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(f *os.File) error {
		if armed.Load() {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return f.Sync()
	}
	rescan := make(chan struct{})
	conn := servePluginConn(t, dir, dir, hold, func(o *driver.ServeOptions) { o.HTTPAddr = addr; o.Rescan = rescan }, c)
	dra := drapb.NewDRAPluginClient(conn)
	var let sync.Once
	letGo := func() { let.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the plugin stops, should a reader fail
	client := &http.Client{Timeout: 20 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		require.NoError(t, err, "%s while a prepare is in its fsync", path)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := get("/readyz")
	require.Equal(t, http.StatusOK, code)

	armed.Store(true)
	done := make(chan error, 1)
	go func() {
		resp, err := dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
			Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
		if err == nil && resp.Claims[string(c.UID)].GetError() != "" {
			err = assert.AnError
		}
		done <- err
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("the prepare ended without an fsync: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the prepare never reached an fsync")
	}
	readyz, _ := get("/readyz")
	metrics, body := get("/metrics")
	assert.NoError(t, readOnce(client, conn, addr, healthReader), "a health report while a prepare is in its fsync")
	// Scans (SIGHUP's) run to their end: the second one starts only when
	// the first has checked the claims, synced their status and
	// published (Run makes one at a time).
	scans := func() float64 {
		_, body := get("/metrics")
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "efakit_plugin_scan_seconds_count "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	before := scans()
	for i := 1; i <= 2; i++ {
		rescan <- struct{}{}
		assert.Eventually(t, func() bool { return scans() >= before+float64(i) }, 20*time.Second, 10*time.Millisecond, "scan %d while a prepare is in its fsync", i)
	}
	letGo()
	require.NoError(t, <-done)
	assert.Equal(t, http.StatusOK, readyz, "/readyz")
	assert.Equal(t, http.StatusOK, metrics, "/metrics")
	assert.True(t, strings.Contains(body, `pci_address="0000:4f:00.0"`), "/metrics has the EFA exporter's series")
}
