package scale_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/efakit/efakit/internal/fixturegen/scale"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestOneCopyIsTheFixture: one copy is the committed p5.48xlarge fixture,
// entry for entry, so the benchmarks' 1x is the machine the fixtures
// describe and k copies are k of it.
func TestOneCopyIsTheFixture(t *testing.T) {
	f, err := os.Open("../../../testdata/sysfs/p5.48xlarge.sysfs")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := sysfs.ParseCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	got := scale.P5(1).Entries()
	if len(got) != len(want) {
		t.Errorf("%d entries, the fixture has %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Path != w.Path || g.Kind != w.Kind || !bytes.Equal(g.Data, w.Data) || g.Target != w.Target || g.Mode.Perm() != w.Mode.Perm() {
			t.Fatalf("entry %d: got %s %q %q %q, the fixture has %s %q %q %q", i, string(g.Kind), g.Path, g.Data, g.Target, string(w.Kind), w.Path, w.Data, w.Target)
		}
	}
}

// TestCopies: k copies read without an error and hold k times the devices,
// each name once, copy c in PCI domain c with NUMA nodes 2c and 2c+1.
func TestCopies(t *testing.T) {
	const k = 3
	capture, err := scale.P5Capture(k)
	if err != nil {
		t.Fatal(err)
	}
	es, err := sysfs.ParseCapture(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	m, err := sysfs.NewMemFS(es)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Scan(m)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	gpus, efas := topo.Of(topology.KindGPU), topo.Of(topology.KindEFA)
	if len(gpus) != k*scale.P5GPUs || len(efas) != k*scale.P5EFAs {
		t.Fatalf("%d GPUs and %d EFAs, want %d and %d", len(gpus), len(efas), k*scale.P5GPUs, k*scale.P5EFAs)
	}
	if n := len(topo.Host.NUMANodes); n != 2*k {
		t.Errorf("%d NUMA nodes, want %d", n, 2*k)
	}
	seen := map[string]bool{}
	once := func(what, s string) {
		if seen[what+" "+s] {
			t.Errorf("%s %s twice", what, s)
		}
		seen[what+" "+s] = true
	}
	netdevs := 0
	for _, d := range topo.Devices {
		once("name", d.Name)
		once("address", d.PCI.Address.String())
		dom := int(d.PCI.Address.Domain)
		if want := fmt.Sprintf("pci%04x:", dom); !strings.HasPrefix(d.PCI.Root, want) {
			t.Errorf("%s: root %s outside domain %04x", d.Name, d.PCI.Root, dom)
		}
		if n := d.NUMANode(); n/2 != dom {
			t.Errorf("%s: NUMA node %d, copy %d has nodes %d and %d", d.Name, n, dom, 2*dom, 2*dom+1)
		}
		if d.Kind != topology.KindEFA {
			continue
		}
		once("uverbs", d.EFA.Verbs.Name)
		once("guid", d.EFA.NodeGUID)
		if d.EFA.Netdev != "" {
			once("netdev", d.EFA.Netdev)
			netdevs++
		}
		if c := topo.Closest(d); len(c) != 1 || c[0].PCI.Address.Domain != d.PCI.Address.Domain {
			t.Errorf("%s: closest %v, want the one GPU of its switch", d.Name, c)
		}
	}
	if netdevs != k {
		t.Errorf("%d EFAs paired with an ENA, want one a copy (%d)", netdevs, k)
	}
	for _, n := range []string{"rdmap79s0", "rdmaP1p79s0", "rdmaP2p201s0"} {
		if topo.ByName(n) == nil {
			t.Errorf("no EFA %s", n)
		}
	}
}
