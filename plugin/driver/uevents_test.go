package driver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/uevent"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/uevents"
	"github.com/efakit/efakit/sysfs"
)

// TestUeventPublishesNewEFA: an EFA that appears is published after its
// uevent, long before the periodic rescan (an hour here), and the source
// is closed when the plugin stops.
func TestUeventPublishesNewEFA(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, "0000:4f:00.0") }))
	p := newTestPlugin(t, s)
	rec := &drivertest.Recorder{}
	p.SetPublisher(rec)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	require.NotContains(t, rec.LastDevices(), "efa-0000-4f-00-0")

	src := uevents.NewFake()
	runDone, watchDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(runDone); p.Run(ctx, time.Hour) }()
	go func() { defer close(watchDone); p.WatchUevents(ctx, src) }()
	defer func() {
		cancel()
		<-runDone
		<-watchDone
		assert.True(t, src.IsClosed())
	}()

	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	require.True(t, src.Send(uevent.Event{Action: "add", Subsystem: "infiniband",
		DevPath: "/devices/pci0000:44/0000:44:00.0/0000:4f:00.0/infiniband/rdmap79s0"}, nil))
	require.Eventually(t, func() bool {
		_, ok := rec.LastDevices()["efa-0000-4f-00-0"]
		return ok
	}, 10*time.Second, 10*time.Millisecond, "the new EFA was not published after its uevent")
	assert.Len(t, rec.LastDevices(), 32)
}

// BenchmarkUeventRescan is the rescan a uevent asks for on the p5 (from
// memory: the sysfs reads of a real node cost more), with an EFA that came
// or went each time, so every rescan publishes: it must fit, with the
// 750 ms wait, in the second the plugin has.
func BenchmarkUeventRescan(b *testing.B) {
	r, err := sysfs.OpenCapture(p5)
	require.NoError(b, err)
	var es, less []sysfs.Entry
	for _, e := range r.ReadLinkFS.(*sysfs.MemFS).Entries() {
		es = append(es, e)
		if !strings.Contains(e.Path, "0000:4f:00.0") {
			less = append(less, e)
		}
	}
	fixtures := make([]*sysfs.MemFS, 2)
	for i, entries := range [][]sysfs.Entry{es, less} {
		fixtures[i], err = sysfs.NewMemFS(entries)
		require.NoError(b, err)
	}
	s := &swapFS{}
	s.cur.Store(fixtures[0])
	w, err := cdi.NewWriter(b.TempDir(), "dra.net")
	require.NoError(b, err)
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
		Config: resources.Config{NodeName: node}, SysfsRoot: s, CDI: w,
		Store: checkpoint.NewStore(b.TempDir()), BootID: bootA,
	})
	require.NoError(b, err)
	p.SetPublisher(&drivertest.Recorder{})
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.cur.Store(fixtures[i%2])
		i++
		if published, err := p.Rescan(ctx); err != nil || !published {
			b.Fatal(published, err)
		}
	}
}
