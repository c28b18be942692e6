package gpudirect_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkAssess is what the GPUDirect judgement adds to the plugin's
// scan of a p5 (8 GPUs, 32 EFAs, 32 pairs) read from disk: scan is the
// plugin's lean pass without what the judgement needs (the placed
// devices' NUMA nodes and CPUs), scan+assess the pass with the IOMMU
// groups and gdr files too (internal/placed), ReadNode (no proc root) and
// Assess, as the plugin runs them at every scan. ACS is left out: it reads
// config space, which on a real node the hypervisor serves a word at a
// time, so a file on disk would not measure it. Compare the two in one
// run:
//
//	go test -run '^$' -bench BenchmarkAssess -benchmem -count 6 ./gpudirect
func BenchmarkAssess(b *testing.B) {
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs")
	require.NoError(b, err)
	dir := filepath.Join(b.TempDir(), "sys")
	require.NoError(b, sysfs.WriteDir(dir, root.ReadLinkFS.(*sysfs.MemFS).Entries()))
	root.Close()
	disk := os.DirFS(dir).(fs.ReadLinkFS)
	withoutJudgement := placed.Lean(false)
	placedBits := withoutJudgement.PCI
	withoutJudgement.PCI = func(vendor, device uint16, class uint32, driver string) uint8 {
		return placedBits(vendor, device, class, driver) &^ sysread.PCIIOMMU
	}
	withoutJudgement.EFA = 0
	b.Run("part=scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := topology.Scan(sysread.NewLean(disk, withoutJudgement)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("part=scan+assess", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t, err := placed.Scan(disk, false)
			if err != nil {
				b.Fatal(err)
			}
			n, err := gpudirect.ReadNode(disk, nil)
			if err != nil {
				b.Fatal(err)
			}
			if pairs := gpudirect.Assess(t, n); len(pairs) != 32 {
				b.Fatal(len(pairs))
			}
		}
	})
}
