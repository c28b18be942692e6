package metrics_test

import (
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// p5 is the p5.48xlarge capture: 32 EFAs.
const p5 = "../../../testdata/sysfs/p5.48xlarge.sysfs"

// ibDir is the RDMA device directory of the p5 fixture's EFA at 0000:4f:00.0.
const ibDir = "devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0/infiniband/rdmap79s0"

// efa0 selects the series of the EFA at 0000:4f:00.0.
var efa0 = map[string]string{"device": "rdmap79s0"}

// dropFile as a file's content in p5With drops the file.
const dropFile = "\x00drop"

// p5With is the p5 fixture with files of the EFA at 4f:00.0 set (path
// under ibDir -> content; dropFile drops the file) and added.
func p5With(t testing.TB, files map[string]string) *sysfs.MemFS {
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

// swapFS is a sysfs whose content a test replaces between reads.
type swapFS struct{ cur atomic.Pointer[sysfs.MemFS] }

func (s *swapFS) Open(n string) (fs.File, error)      { return s.cur.Load().Open(n) }
func (s *swapFS) ReadLink(n string) (string, error)   { return s.cur.Load().ReadLink(n) }
func (s *swapFS) Lstat(n string) (fs.FileInfo, error) { return s.cur.Load().Lstat(n) }

// targets are fsys's EFAs as the plugin hands them to the exporter (its
// claims.State.Targets): every EFA, free, labelled with its published
// device name. A damaged file is the exporter's to report: the scan's
// error is not the test's.
func targets(t testing.TB, fsys fs.ReadLinkFS) []metrics.Target {
	t.Helper()
	_, res, _ := efa.Scan(fsys)
	require.NotNil(t, res)
	require.Len(t, res.EFAs, 32)
	out := make([]metrics.Target, 0, len(res.EFAs))
	for _, d := range res.EFAs {
		out = append(out, metrics.Target{Dev: d, Device: d.Name, PCIAddress: d.PCI.Address.String(), PCIeRoot: d.PCI.Root,
			DRADevice: resources.DeviceName(d.PCI.Address)})
	}
	return out
}

// targetList holds the exporter's targets, which a test changes as a
// prepare or unprepare changes the plugin's.
type targetList struct {
	mu sync.Mutex
	ts []metrics.Target
}

func (l *targetList) get() []metrics.Target   { l.mu.Lock(); defer l.mu.Unlock(); return l.ts }
func (l *targetList) set(ts []metrics.Target) { l.mu.Lock(); defer l.mu.Unlock(); l.ts = ts }

// newEFA is an exporter of fsys's EFAs (read for their list from list,
// the fixture's EFAs when it is nil) in a registry of its own.
func newEFA(t testing.TB, fsys fs.ReadLinkFS, list *targetList) (*metrics.EFA, *prometheus.Registry) {
	t.Helper()
	if list == nil {
		list = &targetList{ts: targets(t, fsys)}
	}
	e := metrics.NewEFA(fsys, list.get)
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	return e, reg
}
