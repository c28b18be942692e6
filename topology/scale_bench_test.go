package topology_test

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/efakit/efakit/internal/fixturegen/scale"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// scaledFS is p5.48xlarge k times over, as a capture in memory.
func scaledFS(b *testing.B, k int) *sysfs.MemFS {
	b.Helper()
	capture, err := scale.P5Capture(k)
	if err != nil {
		b.Fatal(err)
	}
	es, err := sysfs.ParseCapture(bytes.NewReader(capture))
	if err != nil {
		b.Fatal(err)
	}
	m, err := sysfs.NewMemFS(es)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkScale measures how the topology grows with the device count, on
// p5.48xlarge 1, 10 and 100 times over (40 to 4,000 GPUs and EFAs): scan
// is topology.Scan from a capture in memory; answers is Scan plus what
// `efakit list` and `efakit slices` ask of every device (Closest,
// StandardAttributes, ByName). `make bench` runs it; docs/performance.md gives
// the growth. cpu-ns/op is the process's CPU time (garbage collection
// included), steadier than ns/op on a shared machine.
func BenchmarkScale(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		m := scaledFS(b, k)
		b.Run(fmt.Sprintf("p5x%d/scan", k), func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if _, err := topology.Scan(m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("p5x%d/answers", k), func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				t, err := topology.Scan(m)
				if err != nil {
					b.Fatal(err)
				}
				for _, d := range t.Devices {
					if len(t.Closest(d)) == 0 || t.ByName(d.Name) != d {
						b.Fatalf("%s: no closest device or not found by name", d.Name)
					}
					if _, ok := t.StandardAttributes(d); !ok {
						b.Fatalf("%s: no standard attributes", d.Name)
					}
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
