package resources_test

import (
	"testing"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkResources builds the p5's published devices and slices from its
// topology (what a rescan costs once sysfs is read).
func BenchmarkResources(b *testing.B) {
	root, err := sysfs.OpenCapture(p5)
	if err != nil {
		b.Fatal(err)
	}
	topo, err := topology.Scan(root)
	if err != nil {
		b.Fatal(err)
	}
	cfg := resources.Config{NodeName: node}
	b.ReportAllocs()
	for b.Loop() {
		res, err := resources.Build(topo, cfg)
		if err != nil {
			b.Fatal(err)
		}
		_ = resources.Slices(res, cfg)
	}
}
