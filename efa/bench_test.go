package efa_test

import (
	"path/filepath"
	"testing"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
)

// BenchmarkScan is a full discovery (PCI tree and EFAs) of a fixture, from
// memory and from the same tree unpacked on disk. bench/ runs the same next
// to ghw and procfs.
func BenchmarkScan(b *testing.B) {
	for _, name := range []string{"p5.48xlarge", "trn2.48xlarge"} {
		mem, err := sysfs.OpenCapture("../testdata/sysfs/" + name + ".sysfs")
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(b.TempDir(), "sys")
		if err := sysfs.WriteDir(dir, mem.ReadLinkFS.(*sysfs.MemFS).Entries()); err != nil {
			b.Fatal(err)
		}
		disk, err := sysfs.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		defer disk.Close()
		for kind, root := range map[string]*sysfs.Root{"mem": mem, "dir": disk} {
			b.Run(name+"/"+kind, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := efa.Scan(root); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
