package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jaypipes/ghw"
	procsysfs "github.com/prometheus/procfs/sysfs"
	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkCompare is the side-by-side harness behind `make bench-compare`.
// Every iteration is one round: on every fixture, unpacked to a directory,
// each contender answers "which EFAs, on which PCIe root and NUMA node,
// next to which accelerator" as well as it can, one after the other in an
// order that rotates from round to round, so that the machine's noise
// falls on all of them alike. Each contender's turn is timed in process
// CPU time (CLOCK_PROCESS_CPUTIME_ID, which counts the garbage collector's
// threads too) and in wall time, and divided by efakit's turn of the same
// round on the same fixture. At the end it prints, per fixture, each
// contender's time per answer and its ratio to efakit: median and the
// range over the rounds.
//
//	go test -run='^$' -bench=Compare -benchtime=15x
//
// The contenders, all on the same unpacked tree:
//   - efakit: topology.Scan (PCI tree, EFAs and their ports, host, Neuron
//     class devices, and the topology built from them);
//   - ghw+procfs: what a user would write otherwise: ghw.PCI() for the PCI
//     functions (NUMA node, parent, names from pci.ids), procfs's
//     InfiniBandClass() for the RDMA devices and ports, and each RDMA device's
//     "device" link resolved to join the two;
//   - each of ghw.PCI() and procfs InfiniBandClass() alone;
//   - ghw with a small pci.ids (the functions of the fixtures) and with the
//     machine's full one (Debian's pci.ids, as users run it), which ghw
//     parses on every call.
//
// efakit reading the capture file in memory is shown on its own line and
// compared with nothing else: captures against captures.
func BenchmarkCompare(b *testing.B) {
	full := fullPCIIDs()
	if full == "" {
		b.Log("no full pci.ids on this machine (make bench-compare installs Debian's pci.ids): ghw is measured with the small one only")
	}
	type contender struct {
		name string
		run  func(fx *fixture) error
	}
	contenders := []contender{
		{"efakit topology.Scan", func(fx *fixture) error { return efakitScan(fx, fx.dir) }},
		{"ghw PCI() + procfs InfiniBandClass(), small pci.ids", func(fx *fixture) error { return ghwAndProcfs(fx, fx.pciIDs) }},
		{"ghw PCI(), small pci.ids", func(fx *fixture) error { return ghwAlone(fx, fx.pciIDs) }},
		{"procfs InfiniBandClass()", procfsAlone},
	}
	if full != "" {
		contenders = append(contenders,
			contender{"ghw PCI() + procfs InfiniBandClass(), full pci.ids", func(fx *fixture) error { return ghwAndProcfs(fx, full) }},
			contender{"ghw PCI(), full pci.ids", func(fx *fixture) error { return ghwAlone(fx, full) }},
		)
	}
	// The capture in memory: its own line, no ratio to the others.
	const memName = "efakit topology.Scan, capture in memory"
	memRun := func(fx *fixture) error { return efakitScan(fx, fx.mem) }

	b.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "0")
	// reps: how many answers make one turn, so that a turn lasts about
	// turnTarget of CPU time; set from a first, unrecorded, round.
	const turnTarget = 20 * time.Millisecond
	reps := map[string]int{}
	turn := func(fx *fixture, name string, run func(*fixture) error) (cpu, wall time.Duration, err error) {
		n := reps[fx.name+"\x00"+name]
		if n == 0 {
			n = 1
		}
		// A clean heap at the start of every turn, as go test gives a
		// benchmark; the collections a contender's own allocations bring
		// about fall in its turn.
		runtime.GC()
		c0, w0 := cpuNow(), time.Now()
		for range n {
			if err = run(fx); err != nil {
				return 0, 0, fmt.Errorf("%s on %s: %w", name, fx.name, err)
			}
		}
		cpu, wall = cpuNow()-c0, time.Since(w0)
		return cpu / time.Duration(n), wall / time.Duration(n), nil
	}
	for _, fx := range fixtures {
		for _, c := range contenders {
			cpu, _, err := turn(fx, c.name, c.run)
			if err != nil {
				b.Fatal(err)
			}
			reps[fx.name+"\x00"+c.name] = max(1, int(turnTarget/max(cpu, time.Microsecond)))
		}
		cpu, _, err := turn(fx, memName, memRun)
		if err != nil {
			b.Fatal(err)
		}
		reps[fx.name+"\x00"+memName] = max(1, int(turnTarget/max(cpu, time.Microsecond)))
	}

	type samples struct{ cpu, wall, cpuRatio, wallRatio []float64 }
	got := map[string]*samples{} // fixture, contender
	rec := func(fx, name string) *samples {
		k := fx + "\x00" + name
		if got[k] == nil {
			got[k] = &samples{}
		}
		return got[k]
	}
	round := 0
	for b.Loop() {
		for _, fx := range fixtures {
			cpus := make([]time.Duration, len(contenders))
			walls := make([]time.Duration, len(contenders))
			for i := range contenders {
				c := contenders[(i+round)%len(contenders)]
				cpu, wall, err := turn(fx, c.name, c.run)
				if err != nil {
					b.Fatal(err)
				}
				j := (i + round) % len(contenders)
				cpus[j], walls[j] = cpu, wall
			}
			for j, c := range contenders {
				s := rec(fx.name, c.name)
				s.cpu = append(s.cpu, float64(cpus[j]))
				s.wall = append(s.wall, float64(walls[j]))
				s.cpuRatio = append(s.cpuRatio, float64(cpus[j])/float64(cpus[0]))
				s.wallRatio = append(s.wallRatio, float64(walls[j])/float64(walls[0]))
			}
			cpu, wall, err := turn(fx, memName, memRun)
			if err != nil {
				b.Fatal(err)
			}
			s := rec(fx.name, memName)
			s.cpu = append(s.cpu, float64(cpu))
			s.wall = append(s.wall, float64(wall))
		}
		round++
	}
	if round < 3 {
		b.Logf("%d rounds: run with -benchtime=15x for a spread", round)
		return
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%d rounds, interleaved; per answer: median [min-max]; ratio: the contender's time over efakit's in the same round, median [min-max]\n", round)
	for _, fx := range fixtures {
		fmt.Fprintf(&out, "\n%s (%d PCI functions, %d EFAs)\n", fx.name, len(fx.tree.Devices), len(fx.res.EFAs))
		w := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  contender\tCPU\tCPU ratio\twall\twall ratio\t")
		for i, c := range contenders {
			s := rec(fx.name, c.name)
			ratio, wratio := "1", "1"
			if i > 0 {
				ratio, wratio = spreadX(s.cpuRatio), spreadX(s.wallRatio)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t\n", c.name, spreadT(s.cpu), ratio, spreadT(s.wall), wratio)
		}
		s := rec(fx.name, memName)
		fmt.Fprintf(w, "  %s\t%s\t\t%s\t\t\n", memName, spreadT(s.cpu), spreadT(s.wall))
		w.Flush()
	}
	fmt.Fprintln(&out, "\nTargets (CPU ratio medians): procfs InfiniBandClass() at least 1.5x efakit, ghw PCI() with the small pci.ids at least 2x")
	for _, fx := range fixtures {
		p := median(rec(fx.name, "procfs InfiniBandClass()").cpuRatio)
		g := median(rec(fx.name, "ghw PCI(), small pci.ids").cpuRatio)
		fmt.Fprintf(&out, "  %-18s procfs %.2fx %s   ghw %.2fx %s\n", fx.name, p, met(p >= 1.5), g, met(g >= 2))
	}
	fmt.Print(out.String())
	for _, fx := range fixtures {
		b.ReportMetric(median(rec(fx.name, "procfs InfiniBandClass()").cpuRatio), "procfs/efakit-"+fx.name)
		b.ReportMetric(median(rec(fx.name, "ghw PCI(), small pci.ids").cpuRatio), "ghw/efakit-"+fx.name)
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// cpuNow is the CPU time of the whole process: every thread, the garbage
// collector's included.
func cpuNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func spreadT(v []float64) string {
	return fmt.Sprintf("%s [%s-%s]", dur(median(v)), dur(slices.Min(v)), dur(slices.Max(v)))
}

func spreadX(v []float64) string {
	return fmt.Sprintf("%.2fx [%.2f-%.2f]", median(v), slices.Min(v), slices.Max(v))
}

func dur(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2fms", ns/1e6)
	default:
		return fmt.Sprintf("%.0fus", ns/1e3)
	}
}

// fullPCIIDs is the machine's pci.ids, or "".
func fullPCIIDs() string {
	if p := os.Getenv("EFAKIT_BENCH_PCIIDS"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// efakitScan is efakit's whole answer, checked against what the capture
// gives.
func efakitScan(fx *fixture, root *sysfs.Root) error {
	t, err := topology.Scan(root)
	if err != nil {
		return err
	}
	n := 0
	for _, d := range t.Devices {
		if d.Kind == topology.KindEFA {
			n++
		}
	}
	if n != len(fx.res.EFAs) {
		return fmt.Errorf("%d EFAs, want %d", n, len(fx.res.EFAs))
	}
	return nil
}

func ghwAlone(fx *fixture, db string) error {
	os.Setenv("PCIDB_PATH", db)
	info, err := ghwPCI(fx, quiet)
	if err != nil {
		return err
	}
	if len(info.Devices) != len(fx.tree.Devices) {
		return fmt.Errorf("ghw found %d PCI functions, want %d", len(info.Devices), len(fx.tree.Devices))
	}
	return nil
}

func procfsAlone(fx *fixture) error {
	_, err := procfsIB(fx)
	return err
}

// procfsIB reads the InfiniBand class; a tree without one (no RDMA
// device) is an empty answer, as it is for efakit.
func procfsIB(fx *fixture) (procsysfs.InfiniBandClass, error) {
	pfs, err := procsysfs.NewFS(fx.sysDir)
	if err != nil {
		return nil, err
	}
	ibc, err := pfs.InfiniBandClass()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && len(fx.rdmaNames) == 0 {
			return nil, nil
		}
		return nil, err
	}
	if len(ibc) != len(fx.rdmaNames) {
		return nil, fmt.Errorf("procfs found %d InfiniBand devices, want %d", len(ibc), len(fx.rdmaNames))
	}
	return ibc, nil
}

// ghwAndProcfs answers the question with the two libraries together: the
// PCI functions from ghw, the RDMA devices from procfs, joined by each
// RDMA device's PCI address (the target of its "device" link), and each
// EFA's PCIe root found by climbing ghw's parents.
func ghwAndProcfs(fx *fixture, db string) error {
	os.Setenv("PCIDB_PATH", db)
	info, err := ghwPCI(fx, quiet)
	if err != nil {
		return err
	}
	ibc, err := procfsIB(fx)
	if err != nil {
		return err
	}
	byAddr := make(map[string]*ghw.PCIDevice, len(info.Devices))
	for _, d := range info.Devices {
		byAddr[d.Address] = d
	}
	efas := 0
	for name := range ibc {
		target, err := filepath.EvalSymlinks(filepath.Join(fx.sysDir, "class", "infiniband", name, "device"))
		if err != nil {
			return err
		}
		d := byAddr[filepath.Base(target)]
		if d == nil {
			return fmt.Errorf("%s: no PCI function %s", name, filepath.Base(target))
		}
		if d.Vendor.ID != "1d0f" {
			continue
		}
		for d.ParentAddress != "" && byAddr[d.ParentAddress] != nil {
			d = byAddr[d.ParentAddress]
		}
		efas++
	}
	if efas < len(fx.res.EFAs) {
		return fmt.Errorf("ghw+procfs joined %d EFAs, want %d", efas, len(fx.res.EFAs))
	}
	return nil
}
