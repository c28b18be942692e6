//go:build unix

package sysfs_test

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/efakit/efakit/internal/fixturegen/scale"
	"github.com/efakit/efakit/sysfs"
)

// BenchmarkScaleCapture reads p5.48xlarge 1, 10 and 100 times over (40 to
// 4,000 GPUs and EFAs) as captures in memory: ParseCapture then NewMemFS,
// what sysfs.Open does with a capture file after reading it. docs/performance.md
// gives the growth. cpu-ns/op is the process's CPU time (garbage
// collection included), steadier than ns/op on a shared machine.
func BenchmarkScaleCapture(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		capture, err := scale.P5Capture(k)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("p5x%d", k), func(b *testing.B) {
			b.SetBytes(int64(len(capture)))
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				es, err := sysfs.ParseCapture(bytes.NewReader(capture))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sysfs.NewMemFS(es); err != nil {
					b.Fatal(err)
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
