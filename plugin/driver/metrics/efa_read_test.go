package metrics_test

import (
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/sysfs"
)

// counterOpens counts the opens of hw_counters files.
func counterOpens(c *testfixture.CountFS) int {
	n := 0
	for k, v := range c.Calls() {
		if strings.HasPrefix(k, "open ") && strings.Contains(k, "/hw_counters/") {
			n += v
		}
	}
	return n
}

// TestEFAMetricsCache: scrapes within the cache interval, one after the
// other or side by side, share one read of the counters; the first after
// it reads them again.
func TestEFAMetricsCache(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	list := &targetList{ts: targets(t, root.ReadLinkFS)}
	cfs := testfixture.NewCountFS(root.ReadLinkFS)
	e, reg := newEFA(t, cfs, list)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	e.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	before := counterOpens(cfs)

	drivertest.Gather(t, reg)
	oneRead := counterOpens(cfs) - before
	require.Positive(t, oneRead)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reg.Gather()
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	mu.Lock()
	now = now.Add(metrics.DefaultEFACacheFor - time.Millisecond)
	mu.Unlock()
	drivertest.Gather(t, reg)
	assert.Equal(t, oneRead, counterOpens(cfs)-before, "ten scrapes within the interval: one read")

	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	drivertest.Gather(t, reg)
	assert.Equal(t, 2*oneRead, counterOpens(cfs)-before, "after the interval: read again")
}

// TestEFAMetricsConcurrentScrapesOneRead: scrapers that arrive while a read
// is under way wait for it rather than starting their own.
func TestEFAMetricsConcurrentScrapesOneRead(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	list := &targetList{ts: targets(t, root.ReadLinkFS)}
	b := newBlockFS(root.ReadLinkFS, ibDir+"/ports/1/hw_counters/tx_bytes")
	cfs := testfixture.NewCountFS(b)
	e, reg := newEFA(t, cfs, list)
	e.Timeout = time.Minute
	before := counterOpens(cfs)

	var wg sync.WaitGroup
	results := make([][]drivertest.Series, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = drivertest.Gather(t, reg)
		}()
	}
	<-b.entered // the first read is under way and blocked
	close(b.release)
	wg.Wait()
	for _, ss := range results {
		assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 32)
	}
	perEFA := 0
	for k := range cfs.Calls() {
		if strings.HasPrefix(k, "open "+ibDir+"/") && strings.Contains(k, "/hw_counters/") {
			perEFA++
		}
	}
	assert.Equal(t, 32*perEFA, counterOpens(cfs)-before, "four scrapes, one read of each file")
}

// blockFS blocks the first open of path until release is closed, as a
// hung sysfs read would.
type blockFS struct {
	fs.ReadLinkFS
	path    string
	release chan struct{}
	entered chan struct{} // closed at the first open of path
	once    sync.Once
}

func newBlockFS(fsys fs.ReadLinkFS, path string) *blockFS {
	return &blockFS{ReadLinkFS: fsys, path: path, release: make(chan struct{}), entered: make(chan struct{})}
}

func (b *blockFS) Open(n string) (fs.File, error) {
	if n == b.path {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.ReadLinkFS.Open(n)
}

// TestEFAMetricsTimeout: a scrape whose sysfs read hangs returns at the
// bound with every other EFA, counts the timeout, and the hung EFA is not
// read again (no goroutine piles up) until its read returns.
func TestEFAMetricsTimeout(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	list := &targetList{ts: targets(t, root.ReadLinkFS)}
	b := newBlockFS(root.ReadLinkFS, ibDir+"/ports/1/hw_counters/tx_bytes")
	cfs := testfixture.NewCountFS(b)
	e, reg := newEFA(t, cfs, list)
	// Long enough for the 31 other reads (a few milliseconds) on a loaded
	// machine under the race detector.
	e.Timeout = metrics.DefaultEFATimeout
	e.CacheFor = 0

	scrape := func() []drivertest.Series {
		done := make(chan []drivertest.Series, 1)
		go func() { done <- drivertest.Gather(t, reg) }()
		select {
		case ss := <-done:
			return ss
		case <-time.After(time.Minute):
			t.Fatal("the scrape hangs")
			return nil
		}
	}
	ss := scrape()
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", efa0), "still being read")
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 31)
	assert.Equal(t, 1.0, drivertest.One(t, ss, "efakit_efa_read_timeouts_total", nil))

	ss = scrape()
	assert.Empty(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", efa0))
	assert.Len(t, drivertest.Find(ss, "efakit_efa_tx_bytes_total", nil), 31)
	assert.Equal(t, 2.0, drivertest.One(t, ss, "efakit_efa_read_timeouts_total", nil))
	assert.Equal(t, 1, cfs.Calls()["open "+b.path], "not read again while the first read hangs")

	close(b.release)
	require.Eventually(t, func() bool {
		return len(drivertest.Find(drivertest.Gather(t, reg), "efakit_efa_tx_bytes_total", efa0)) == 1
	}, time.Minute, 10*time.Millisecond)
}

// BenchmarkEFAMetricsScrape: one scrape of the plugin's whole registry
// that reads the 32 EFAs of the p5 fixture (in memory) anew.
func BenchmarkEFAMetricsScrape(b *testing.B) {
	root, err := sysfs.OpenCapture(p5)
	require.NoError(b, err)
	ts := targets(b, root.ReadLinkFS)
	m := metrics.New()
	e := metrics.NewEFA(root.ReadLinkFS, func() []metrics.Target { return ts })
	e.CacheFor = 0
	m.Registry.MustRegister(e)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
