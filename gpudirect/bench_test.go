package gpudirect_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkAssess is what the GPUDirect judgement adds to a scan of a p5
// (8 GPUs, 32 EFAs, 32 pairs) read from disk: scan is topology.Scan alone,
// scan+assess is the scan, ReadNode (no proc root) and Assess, as the
// plugin runs them at every scan. ReadACS is left out: it reads config
// space, which on a real node the hypervisor serves a word at a time, so
// a file on disk would not measure it. Compare the two in one run:
//
//	go test -run '^$' -bench BenchmarkAssess -benchmem -count 6 ./gpudirect
func BenchmarkAssess(b *testing.B) {
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs")
	require.NoError(b, err)
	dir := filepath.Join(b.TempDir(), "sys")
	require.NoError(b, sysfs.WriteDir(dir, root.ReadLinkFS.(*sysfs.MemFS).Entries()))
	root.Close()
	disk := os.DirFS(dir).(fs.ReadLinkFS)
	b.Run("part=scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := topology.Scan(disk); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("part=scan+assess", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t, err := topology.Scan(disk)
			if err != nil {
				b.Fatal(err)
			}
			r := sysread.New(disk)
			n, err := gpudirect.ReadNode(r, nil)
			if err != nil {
				b.Fatal(err)
			}
			pairs, err := gpudirect.Assess(r, t, n)
			if err != nil || len(pairs) != 32 {
				b.Fatal(err, len(pairs))
			}
		}
	})
}
