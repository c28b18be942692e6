package main

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/efakit/efakit/internal/fixturegen/machines"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// testdata is the committed fixture directory, from this package's.
const testdata = "../../testdata/sysfs"

// TestUpToDate fails when a committed fixture or the README differs from
// what the generator makes now.
func TestUpToDate(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(testdata, files); err != nil {
		t.Fatalf("%v\nrun `go run ./internal/fixturegen -o testdata/sysfs` from the module root", err)
	}
}

// TestDeterministic guards the byte-for-byte comparison: two runs must
// agree.
func TestDeterministic(t *testing.T) {
	a, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s: two runs differ", name)
		}
	}
}

// tree is one generated fixture, parsed back.
type tree struct {
	entries []sysfs.Entry
	r       *sysread.Reader
}

func load(t *testing.T, name string, data []byte) *tree {
	t.Helper()
	es, err := sysfs.ParseCapture(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	m, err := sysfs.NewMemFS(es)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &tree{entries: es, r: sysread.New(m)}
}

func (tr *tree) read(t *testing.T, p string) string {
	t.Helper()
	s, err := tr.r.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSuffix(string(s), "\n")
}

func (tr *tree) list(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := tr.r.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func (tr *tree) resolve(t *testing.T, p string) string {
	t.Helper()
	real, err := tr.r.Resolve(p)
	if err != nil {
		t.Fatalf("resolve %s: %v", p, err)
	}
	return real
}

// root is the pcieRoot of a PCI function: the first element under devices/
// of its resolved bus/pci/devices link.
func (tr *tree) root(t *testing.T, addr string) string {
	t.Helper()
	return strings.Split(tr.resolve(t, "bus/pci/devices/"+addr), "/")[1]
}

// byID lists the PCI functions with the given vendor and device IDs (device
// 0 matches any), in address order.
func (tr *tree) byID(t *testing.T, vendor, device uint16) []string {
	t.Helper()
	var out []string
	for _, a := range tr.list(t, "bus/pci/devices") {
		v := tr.read(t, "bus/pci/devices/"+a+"/vendor")
		d := tr.read(t, "bus/pci/devices/"+a+"/device")
		if v == fmt.Sprintf("0x%04x", vendor) && (device == 0 || d == fmt.Sprintf("0x%04x", device)) {
			out = append(out, a)
		}
	}
	return out
}

func generated(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestTrees checks every fixture the way a live tree is shaped: every link
// resolves inside the root, uverbs numbers follow the bus order, and the
// identities are unique.
func TestTrees(t *testing.T) {
	files := generated(t)
	for _, name := range machines.Bundled() {
		t.Run(name, func(t *testing.T) {
			data := files[name+".sysfs"]
			if len(data) >= 1<<20 {
				t.Errorf("%d bytes, want under 1 MiB", len(data))
			}
			tr := load(t, name, data)
			for _, e := range tr.entries {
				if e.Kind == sysfs.KindLink {
					tr.resolve(t, e.Path)
				}
			}
			for _, dir := range []string{"bus/pci/devices", "class/infiniband", "class/infiniband_verbs", "class/net"} {
				for _, n := range tr.list(t, dir) {
					tr.resolve(t, dir+"/"+n)
				}
			}
			if got := tr.read(t, "class/dmi/id/product_name"); got != name {
				t.Errorf("product_name %q, want %q", got, name)
			}

			// uverbsN: N in PCI address order, dev 231:192+N, ibdev the
			// class/infiniband device of the same function.
			var addrs []string
			for i := range len(tr.list(t, "class/infiniband_verbs")) {
				uv := fmt.Sprintf("class/infiniband_verbs/uverbs%d", i)
				a := path.Base(tr.resolve(t, uv+"/device"))
				addrs = append(addrs, a)
				if got, want := tr.read(t, uv+"/dev"), fmt.Sprintf("231:%d", 192+i); got != want {
					t.Errorf("%s/dev = %q, want %q", uv, got, want)
				}
				ib := tr.read(t, uv+"/ibdev")
				if got := path.Base(tr.resolve(t, "class/infiniband/"+ib+"/device")); got != a {
					t.Errorf("%s: ibdev %s is on %s, the uverbs device on %s", uv, ib, got, a)
				}
			}
			// A link to an ancestor is written as the kernel writes it:
			// climbing above the target and naming it.
			for _, e := range tr.entries {
				if e.Kind != sysfs.KindLink || path.Base(e.Path) != "device" {
					continue
				}
				dir := path.Dir(e.Path) // .../<addr>/infiniband/<name> or .../infiniband_verbs/uverbsN
				if a := path.Base(path.Dir(path.Dir(dir))); strings.Contains(dir, "/infiniband") {
					if want := "../../../" + a; e.Target != want {
						t.Errorf("%s -> %s, want %s", e.Path, e.Target, want)
					}
				}
			}
			if !slices.IsSorted(addrs) {
				t.Errorf("uverbs numbers not in bus order: %v", addrs)
			}
			if n := len(tr.list(t, "class/infiniband")); n != len(addrs) {
				t.Errorf("%d RDMA devices, %d uverbs devices", n, len(addrs))
			}

			seen := map[string]string{}
			unique := func(kind, v, where string) {
				if prev, ok := seen[kind+v]; ok {
					t.Errorf("%s %s of %s repeats that of %s", kind, v, where, prev)
				}
				seen[kind+v] = where
			}
			for _, ib := range tr.list(t, "class/infiniband") {
				d := "class/infiniband/" + ib
				if g := tr.read(t, d+"/node_guid"); !strings.HasPrefix(name, "p4d") {
					unique("node_guid", g, ib)
				} else if g != "0000:0000:0000:0000" {
					t.Errorf("%s: node_guid %s, want zeros on p4d", ib, g)
				}
				gid := tr.read(t, d+"/ports/1/gids/0")
				if !strings.HasPrefix(gid, "fe80:0000:0000:0000:") || len(gid) != 39 {
					t.Errorf("%s: GID %q", ib, gid)
				}
				unique("GID", gid, ib)
			}
			for _, n := range tr.list(t, "class/net") {
				mac := tr.read(t, "class/net/"+n+"/address")
				if n == "lo" {
					continue
				}
				b, err := strconv.ParseUint(mac[:2], 16, 8)
				if err != nil || b&2 == 0 || b&1 != 0 {
					t.Errorf("%s: MAC %s is not a locally administered unicast address", n, mac)
				}
				unique("MAC", mac, n)
			}

			// Every function has its NUMA node's CPU list.
			nodes := map[string]string{"-1": tr.allCPUs(t)}
			for _, n := range tr.list(t, "devices/system/node") {
				if strings.HasPrefix(n, "node") {
					nodes[strings.TrimPrefix(n, "node")] = tr.read(t, "devices/system/node/"+n+"/cpulist")
				}
			}
			for _, a := range tr.list(t, "bus/pci/devices") {
				d := "bus/pci/devices/" + a
				numa := tr.read(t, d+"/numa_node")
				if got, want := tr.read(t, d+"/local_cpulist"), nodes[numa]; got != want || want == "" {
					t.Errorf("%s: numa_node %s, local_cpulist %q, want %q", a, numa, got, want)
				}
			}
		})
	}
}

// allCPUs joins the CPU lists of the NUMA nodes (the fixtures with no NUMA
// have one node).
func (tr *tree) allCPUs(t *testing.T) string {
	nodes := tr.list(t, "devices/system/node")
	if slices.Contains(nodes, "node1") {
		return "" // numa_node -1 is not expected on a multi-node fixture
	}
	return tr.read(t, "devices/system/node/node0/cpulist")
}

// want is what docs/hardware.md says a fixture holds, written out here
// independently of the generator.
type want struct {
	ib       []string // RDMA device names
	gpus     []string // NVIDIA 3D controllers
	neurons  []string // Neuron PCI functions
	mlx5     []string
	sameRoot [][]string     // functions that must share a pcieRoot
	numa     map[string]int // function -> numa_node
}

func rdmaps(buses ...int) []string {
	var out []string
	for _, b := range buses {
		out = append(out, fmt.Sprintf("rdmap%ds0", b))
	}
	return out
}

func span(from, n int) []int {
	var out []int
	for i := range n {
		out = append(out, from+i)
	}
	return out
}

func a(bus, slot int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, slot) }

func buses(bs ...int) []string {
	var out []string
	for _, b := range bs {
		out = append(out, a(b, 0))
	}
	return out
}

var wants = map[string]want{
	"p4d.24xlarge": {
		ib:   []string{"rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"},
		gpus: []string{a(0x10, 0x1c), a(0x10, 0x1d), a(0x20, 0x1c), a(0x20, 0x1d), a(0x90, 0x1c), a(0x90, 0x1d), a(0xa0, 0x1c), a(0xa0, 0x1d)},
		sameRoot: [][]string{
			{a(0x10, 0x1b), a(0x10, 0x1c), a(0x10, 0x1d)},
			{a(0xa0, 0x1b), a(0xa0, 0x1c), a(0xa0, 0x1d)},
		},
		numa: map[string]int{a(0x10, 0x1b): 0, a(0x20, 0x1b): 0, a(0x90, 0x1b): 1, a(0xa0, 0x1b): 1, a(0x80, 0x1a): 1},
	},
	"p5.48xlarge": {
		ib: slices.Concat(rdmaps(span(79, 4)...), rdmaps(span(96, 4)...), rdmaps(span(113, 4)...), rdmaps(span(130, 4)...),
			rdmaps(span(147, 4)...), rdmaps(span(164, 4)...), rdmaps(span(181, 4)...), rdmaps(span(198, 4)...)),
		gpus: buses(0x53, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca),
		sameRoot: [][]string{
			buses(0x4f, 0x50, 0x51, 0x52, 0x53), buses(0x60, 0x61, 0x62, 0x63, 0x64),
			buses(0x71, 0x72, 0x73, 0x74, 0x75), buses(0x82, 0x83, 0x84, 0x85, 0x86),
			buses(0x93, 0x94, 0x95, 0x96, 0x97), buses(0xa4, 0xa5, 0xa6, 0xa7, 0xa8),
			buses(0xb5, 0xb6, 0xb7, 0xb8, 0xb9), buses(0xc6, 0xc7, 0xc8, 0xc9, 0xca),
		},
		numa: map[string]int{a(0x53, 0): 0, a(0x64, 0): 0, a(0x75, 0): 0, a(0x86, 0): 0, a(0x97, 0): 1, a(0xa8, 0): 1, a(0xb9, 0): 1, a(0xca, 0): 1},
	},
	"p4de.24xlarge": {
		ib:   []string{"rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"},
		gpus: []string{a(0x10, 0x1c), a(0x10, 0x1d), a(0x20, 0x1c), a(0x20, 0x1d), a(0x90, 0x1c), a(0x90, 0x1d), a(0xa0, 0x1c), a(0xa0, 0x1d)},
		sameRoot: [][]string{
			{a(0x10, 0x1b), a(0x10, 0x1c), a(0x10, 0x1d)},
			{a(0x90, 0x1b), a(0x90, 0x1c), a(0x90, 0x1d)},
		},
		numa: map[string]int{a(0x10, 0x1b): 0, a(0x20, 0x1b): 0, a(0x90, 0x1b): 1, a(0xa0, 0x1b): 1},
	},
	"p5e.48xlarge": {
		ib: slices.Concat(rdmaps(span(79, 4)...), rdmaps(span(96, 4)...), rdmaps(span(113, 4)...), rdmaps(span(130, 4)...),
			rdmaps(span(147, 4)...), rdmaps(span(164, 4)...), rdmaps(span(181, 4)...), rdmaps(span(198, 4)...)),
		gpus:     buses(0x53, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca),
		sameRoot: [][]string{buses(0x4f, 0x50, 0x51, 0x52, 0x53), buses(0xc6, 0xc7, 0xc8, 0xc9, 0xca)},
		numa:     map[string]int{a(0x53, 0): 1, a(0x75, 0): 0, a(0x86, 0): 0, a(0x97, 0): 3, a(0xb9, 0): 2, a(0xca, 0): 2},
	},
	"p6-b300.48xlarge": {
		ib: slices.Concat(rdmaps(0x56, 0x57, 0x65, 0x66, 0x74, 0x75, 0x83, 0x84, 0x92, 0x93, 0xa1, 0xa2, 0xb0, 0xb1, 0xbf, 0xc0),
			[]string{"ibp198s0f0", "ibp199s0f0"}),
		gpus:     buses(0x58, 0x67, 0x76, 0x85, 0x94, 0xa3, 0xb2, 0xc1),
		mlx5:     buses(0xc6, 0xc7),
		sameRoot: [][]string{buses(0x56, 0x57, 0x58), buses(0xbf, 0xc0, 0xc1)},
		numa:     map[string]int{a(0x47, 0): 0, a(0x56, 0): 0, a(0xc0, 0): 1},
	},
	"p6e-gb200.36xlarge": {
		ib:       rdmaps(0x27, 0x28, 0x36, 0x37, 0x3d, 0x3e, 0x4c, 0x4d, 0x9a, 0x9b, 0xa9, 0xaa, 0xb0, 0xb1, 0xbf, 0xc0),
		gpus:     buses(0x29, 0x3f, 0x9c, 0xb2),
		sameRoot: [][]string{buses(0x27, 0x28, 0x29), buses(0xb0, 0xb1, 0xb2)},
		numa:     map[string]int{a(0x27, 0): 0, a(0x4d, 0): 0, a(0x9a, 0): 1, a(0xc0, 0): 1},
	},
	"p5en.48xlarge": {
		ib:       slices.Concat(rdmaps(span(85, 4)...), rdmaps(span(110, 4)...), rdmaps(span(135, 4)...), rdmaps(span(160, 4)...)),
		gpus:     buses(0x59, 0x5a, 0x72, 0x73, 0x8b, 0x8c, 0xa4, 0xa5),
		sameRoot: [][]string{buses(0x47, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a), buses(0x6e, 0x71, 0x72, 0x73), buses(0x87, 0x8b), buses(0xa0, 0xa5)},
		numa:     map[string]int{a(0x59, 0): 0, a(0x72, 0): 0, a(0x8b, 0): 1, a(0xa4, 0): 1},
	},
	"p6-b200.48xlarge": {
		ib:       []string{"rdmap79s0", "rdmap80s0", "rdmap96s0", "rdmap97s0", "rdmap113s0", "rdmap114s0", "ibp115s0f0", "ibp116s0f0", "rdmap132s0", "rdmap133s0"},
		gpus:     buses(0x51, 0x52, 0x62, 0x63, 0x75, 0x76, 0x86, 0x87),
		mlx5:     buses(0x73, 0x74),
		sameRoot: [][]string{buses(0x4f, 0x50, 0x51, 0x52), buses(0x71, 0x72, 0x73, 0x74, 0x75, 0x76), buses(0x84, 0x85, 0x86, 0x87)},
	},
	"trn1.32xlarge": {
		ib: []string{"rdmap16s25", "rdmap16s26", "rdmap32s25", "rdmap32s26", "rdmap144s25", "rdmap144s26", "rdmap160s25", "rdmap160s26"},
		// Neuron index 0..15 -> BDF, from docs/hardware.md.
		neurons: []string{a(0x10, 0x1b), a(0x10, 0x1e), a(0xa0, 0x1b), a(0xa0, 0x1e), a(0x20, 0x1e), a(0x20, 0x1c), a(0x90, 0x1e), a(0x90, 0x1c),
			a(0x20, 0x1d), a(0x20, 0x1b), a(0x90, 0x1d), a(0x90, 0x1b), a(0x10, 0x1c), a(0x10, 0x1d), a(0xa0, 0x1c), a(0xa0, 0x1d)},
		// Neuron -> EFA pairs share a root.
		sameRoot: [][]string{{a(0x10, 0x1b), a(0x10, 0x1a)}, {a(0xa0, 0x1b), a(0xa0, 0x1a)}, {a(0x20, 0x1e), a(0x20, 0x19)}, {a(0x90, 0x1e), a(0x90, 0x19)}},
		numa:     map[string]int{a(0x10, 0x19): 0, a(0x20, 0x19): 0, a(0x90, 0x19): 1, a(0xa0, 0x19): 1},
	},
	"trn1n.32xlarge": {
		ib: []string{"rdmap16s23", "rdmap16s24", "rdmap16s25", "rdmap16s26", "rdmap32s23", "rdmap32s24", "rdmap32s25", "rdmap32s26",
			"rdmap144s23", "rdmap144s24", "rdmap144s25", "rdmap144s26", "rdmap160s23", "rdmap160s24", "rdmap160s25", "rdmap160s26"},
		// Neuron devices as on trn1.
		neurons: []string{a(0x10, 0x1b), a(0x10, 0x1e), a(0xa0, 0x1b), a(0xa0, 0x1e), a(0x20, 0x1e), a(0x20, 0x1c), a(0x90, 0x1e), a(0x90, 0x1c),
			a(0x20, 0x1d), a(0x20, 0x1b), a(0x90, 0x1d), a(0x90, 0x1b), a(0x10, 0x1c), a(0x10, 0x1d), a(0xa0, 0x1c), a(0xa0, 0x1d)},
		// trn1n Neuron -> EFA: 0 10:17, 4 20:19, 6 90:19, 2 a0:17.
		sameRoot: [][]string{{a(0x10, 0x1b), a(0x10, 0x17)}, {a(0x20, 0x1e), a(0x20, 0x19)}, {a(0x90, 0x1e), a(0x90, 0x19)}, {a(0xa0, 0x1b), a(0xa0, 0x17)}},
		numa:     map[string]int{a(0x10, 0x17): 0, a(0x20, 0x18): 0, a(0x90, 0x19): 1, a(0xa0, 0x1a): 1},
	},
	"trn2.48xlarge": {
		ib:      rdmaps(0x56, 0x57, 0x6c, 0x6d, 0x82, 0x83, 0x98, 0x99, 0xb3, 0xb4, 0xc9, 0xca, 0xdf, 0xe0, 0xf5, 0xf6),
		neurons: buses(0xcc, 0xb5, 0xb6, 0xcb, 0x6f, 0x58, 0x59, 0x6e, 0x9b, 0x84, 0x85, 0x9a, 0xf8, 0xe1, 0xe2, 0xf7),
		// Neuron i with its EFA, from the Neuron -> EFA table.
		sameRoot: [][]string{
			buses(0xcc, 0xc9), buses(0xb5, 0xb4), buses(0xb6, 0xb3), buses(0xcb, 0xca), buses(0x6f, 0x6c), buses(0x58, 0x57), buses(0x59, 0x56), buses(0x6e, 0x6d),
			buses(0x9b, 0x98), buses(0x84, 0x83), buses(0x85, 0x82), buses(0x9a, 0x99), buses(0xf8, 0xf5), buses(0xe1, 0xe0), buses(0xe2, 0xdf), buses(0xf7, 0xf6),
		},
		numa: map[string]int{a(0x56, 0): 0, a(0x9b, 0): 0, a(0xb3, 0): 1, a(0xf8, 0): 1},
	},
	"g5.8xlarge": {
		ib:   []string{"efa_0"},
		gpus: []string{a(0, 0x1e)},
		numa: map[string]int{a(0, 0x06): -1, a(0, 0x1e): -1},
	},
	"m5.xlarge": {},
}

// TestContents checks each fixture against docs/hardware.md's tables.
func TestContents(t *testing.T) {
	files := generated(t)
	for _, name := range machines.Bundled() {
		t.Run(name, func(t *testing.T) {
			w, ok := wants[name]
			if !ok {
				t.Fatal("no expectations for this fixture")
			}
			tr := load(t, name, files[name+".sysfs"])
			ib := tr.list(t, "class/infiniband")
			if !sameSet(ib, w.ib) {
				t.Errorf("RDMA devices %v, want %v", ib, w.ib)
			}
			if got := filterClass(t, tr, tr.byID(t, 0x10de, 0), "0x030200"); !sameSet(got, w.gpus) {
				t.Errorf("GPUs %v, want %v", got, w.gpus)
			}
			if got := filterClass(t, tr, tr.byID(t, 0x1d0f, 0), "0x088000"); !sameSet(got, w.neurons) {
				t.Errorf("Neuron functions %v, want %v", got, w.neurons)
			}
			if got := tr.byID(t, 0x15b3, 0); !sameSet(got, w.mlx5) {
				t.Errorf("mlx5 functions %v, want %v", got, w.mlx5)
			}
			for _, g := range w.sameRoot {
				r0 := tr.root(t, g[0])
				for _, x := range g[1:] {
					if r := tr.root(t, x); r != r0 {
						t.Errorf("%s on %s, %s on %s: want one pcieRoot", g[0], r0, x, r)
					}
				}
			}
			for addr, n := range w.numa {
				if got := tr.read(t, "bus/pci/devices/"+addr+"/numa_node"); got != strconv.Itoa(n) {
					t.Errorf("%s: numa_node %s, want %d", addr, got, n)
				}
			}
			if len(w.neurons) > 0 {
				for i, nb := range machines.Torus4x4() {
					d := fmt.Sprintf("class/neuron_device/neuron%d", i)
					tr.resolve(t, d)
					want := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(nb)), ", "), "[]")
					if got := tr.read(t, d+"/connected_devices"); got != want {
						t.Errorf("%s: connected_devices %q, want %q", d, got, want)
					}
				}
			}
			for _, x := range w.mlx5 {
				d := "bus/pci/devices/" + x + "/infiniband"
				names := tr.list(t, d)
				if len(names) != 1 {
					t.Fatalf("%s: %v", d, names)
				}
				d += "/" + names[0]
				if got := tr.read(t, d+"/node_type"); got != "1: CA" {
					t.Errorf("%s: node_type %q", d, got)
				}
				if got := tr.read(t, d+"/ports/1/link_layer"); got != "InfiniBand" {
					t.Errorf("%s: link_layer %q", d, got)
				}
			}
		})
	}
}

func filterClass(t *testing.T, tr *tree, addrs []string, class string) []string {
	t.Helper()
	var out []string
	for _, x := range addrs {
		if tr.read(t, "bus/pci/devices/"+x+"/class") == class {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
