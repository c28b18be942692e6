package efa_test
import ("testing";"github.com/efakit/efakit/efa";"github.com/efakit/efakit/sysfs")
func BenchmarkZZ(b *testing.B){ mem,_ := sysfs.OpenCapture("../testdata/sysfs/p5.48xlarge.sysfs"); b.ReportAllocs(); for b.Loop(){ efa.Scan(mem) } }
