package topology_test

import (
	"testing"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkTopology measures the whole topology of a fixture from a capture
// in memory (scan: sysfs to answers), and the graph work alone (build:
// Build plus every pair's link class and every device's closest devices,
// what `efakit topo` computes).
func BenchmarkTopology(b *testing.B) {
	for _, name := range []string{"p5.48xlarge", "trn2.48xlarge"} {
		root, err := sysfs.OpenCapture("../testdata/sysfs/" + name + ".sysfs")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := topology.Scan(root); err != nil {
					b.Fatal(err)
				}
			}
		})
		r := sysread.New(root)
		tree, _ := pcie.Discover(r)
		res, _ := efa.Discover(r, tree)
		h, _ := host.Read(r)
		class, _ := neuron.ReadClass(r)
		b.Run(name+"/build", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t := topology.Build(tree, res, h, class)
				for _, d := range t.Devices {
					for _, o := range t.Devices {
						_ = t.Link(d, o)
					}
					_ = t.Closest(d)
					_, _ = t.StandardAttributes(d)
				}
			}
		})
	}
}
