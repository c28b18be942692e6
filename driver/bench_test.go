package driver_test

import (
	"testing"

	"github.com/efakit/efakit/driver"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkResources builds the p5's published devices and slices from its
// topology (what a rescan costs once sysfs is read).
func BenchmarkResources(b *testing.B) {
	root, err := sysfs.OpenCapture("../testdata/sysfs/p5.48xlarge.sysfs")
	if err != nil {
		b.Fatal(err)
	}
	topo, err := topology.Scan(root)
	if err != nil {
		b.Fatal(err)
	}
	cfg := driver.Config{NodeName: "node-1"}
	b.ReportAllocs()
	for b.Loop() {
		res, err := driver.Resources(topo, nil, cfg)
		if err != nil {
			b.Fatal(err)
		}
		_ = driver.Slices(res, cfg)
	}
}
