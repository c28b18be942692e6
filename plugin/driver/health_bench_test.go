package driver_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkHealthScan is the CPU one health check costs at 32 EFAs (the
// p5 capture with every counter the newest hardware has), from memory and
// from files on disk (what the kernel's sysfs costs is more: each read
// runs the driver's show function, and hw_counters reads the device's
// statistics through an admin command, cached for the RDMA core's
// lifespan). Its parts, each timed alone:
//   - scan: the plugin's scan (internal/placed: topology.Scan of a lean
//     pass), the devices and ports;
//   - counters: every EFA's counters read (the EFA exporter's read, which
//     the checks share with the scrapes);
//   - grade: the counters read graded (resources.Grade);
//   - rescan: the plugin's whole health check on a steady node (scan,
//     counters, grade, build, nothing to publish), what runs every
//     --health-interval, with the exporter's cache off (a read every
//     time).
func BenchmarkHealthScan(b *testing.B) {
	mem := withCounters(b, nil)
	dir := filepath.Join(b.TempDir(), "sys")
	require.NoError(b, sysfs.WriteDir(dir, mem.Entries()))
	for _, root := range []struct {
		name string
		fsys fs.ReadLinkFS
	}{{"fs=memory", mem}, {"fs=disk", os.DirFS(dir).(fs.ReadLinkFS)}} {
		topo, err := topology.Scan(root.fsys)
		require.NoError(b, err)
		b.Run(root.name+"/part=scan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := placed.Scan(root.fsys, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(root.name+"/part=counters", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range topo.Of(topology.KindEFA) {
					if _, err := d.EFA.ReadCounters(root.fsys); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(root.name+"/part=grade", func(b *testing.B) {
			tr := health.NewTracker(health.DefaultPolicy())
			read := map[string]*efa.Counters{}
			for _, d := range topo.Of(topology.KindEFA) {
				c, err := d.EFA.ReadCounters(root.fsys)
				require.NoError(b, err)
				read[d.PCI.Address.String()] = c
			}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(10 * time.Second)
				if v := resources.Grade(topo, tr, resources.CountersOf(read), now); len(v) != 32 {
					b.Fatal(len(v))
				}
			}
		})
		b.Run(root.name+"/part=rescan", func(b *testing.B) {
			w, err := cdi.NewWriter(b.TempDir(), "dra.net")
			require.NoError(b, err)
			p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
				Config: resources.Config{NodeName: node}, SysfsRoot: root.fsys, CDI: w,
				Store: checkpoint.NewStore(b.TempDir()), BootID: bootA,
			})
			require.NoError(b, err)
			p.SetPublisher(&drivertest.Recorder{})
			p.EFAMetrics().CacheFor = 0
			ctx := context.Background()
			_, err = p.Rescan(ctx)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if published, err := p.Rescan(ctx); err != nil || published {
					b.Fatal(published, err)
				}
			}
		})
	}
}
