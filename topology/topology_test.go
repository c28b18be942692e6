package topology_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

func fixtures(t testing.TB) map[string]string { return testfixture.Captures(t, "..") }

func scan(t testing.TB, name string) *topology.Topology {
	t.Helper()
	r, err := sysfs.Open("../testdata/sysfs/" + name + ".sysfs")
	require.NoError(t, err)
	topo, err := topology.Scan(r)
	require.NoError(t, err)
	return topo
}

func names(ds []*topology.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

// TestHardwareFacts states docs/hardware.md's pairings by hand.
func TestHardwareFacts(t *testing.T) {
	t.Parallel()
	t.Run("p5: each GPU has the four EFAs behind its switch", func(t *testing.T) {
		topo := scan(t, "p5.48xlarge")
		gpus := topo.Of(topology.KindGPU)
		require.Len(t, gpus, 8)
		for k, g := range gpus {
			assert.Equal(t, fmt.Sprintf("0000:%02x:00.0", []int{0x53, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca}[k]), g.PCI.Address.String())
			var want []string
			for j := range 4 {
				want = append(want, fmt.Sprintf("rdmap%ds0", []int{0x4f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6}[k]+j))
			}
			efas := topo.Closest(g)
			assert.Equal(t, want, names(efas), g.Name)
			for _, e := range efas {
				assert.Equal(t, topology.LinkPXB, topo.Link(g, e))
				assert.Equal(t, []string{g.Name}, names(topo.Closest(e)))
			}
		}
		// Across the two sockets: SYS; within a socket, other roots: NODE.
		assert.Equal(t, topology.LinkNode, topo.Link(gpus[0], topo.ByName("rdmap96s0")))
		assert.Equal(t, topology.LinkSys, topo.Link(gpus[0], topo.ByName("rdmap198s0")))
		assert.Equal(t, topology.LinkSelf, topo.Link(gpus[0], gpus[0]))
	})
	t.Run("p4d: each EFA pairs with the two GPUs of its root", func(t *testing.T) {
		topo := scan(t, "p4d.24xlarge")
		for _, e := range topo.Of(topology.KindEFA) {
			acc := topo.Closest(e)
			require.Len(t, acc, 2, e.Name)
			bus := e.PCI.Address.Bus
			for _, g := range acc {
				assert.Equal(t, bus, g.PCI.Address.Bus)
				assert.Contains(t, []uint8{0x1c, 0x1d}, g.PCI.Address.Device)
				assert.Equal(t, topology.LinkPHB, topo.Link(e, g))
			}
		}
		assert.Len(t, topo.Of(topology.KindGPU), 8, "NVSwitches are not GPUs")
	})
	t.Run("p5en: two GPUs and four EFAs share each switch", func(t *testing.T) {
		topo := scan(t, "p5en.48xlarge")
		for _, g := range topo.Of(topology.KindGPU) {
			efas := topo.Closest(g)
			require.Len(t, efas, 4, g.Name)
			for _, e := range efas {
				assert.Len(t, topo.Closest(e), 2)
				assert.Contains(t, names(topo.Closest(e)), g.Name)
				assert.Equal(t, g.PCI.Root, e.PCI.Root)
			}
		}
	})
	t.Run("p6-b200: mlx5 devices are not EFAs", func(t *testing.T) {
		topo := scan(t, "p6-b200.48xlarge")
		for _, e := range topo.Of(topology.KindEFA) {
			assert.True(t, strings.HasPrefix(e.Name, "rdmap"), e.Name)
		}
		assert.Len(t, topo.Of(topology.KindEFA), 8)
		for _, g := range topo.Of(topology.KindGPU) {
			assert.Len(t, topo.Closest(g), 2, "2 GPUs and 2 NICs per switch")
		}
	})
	t.Run("trn1: the Neuron/EFA table", func(t *testing.T) {
		topo := scan(t, "trn1.32xlarge")
		want := map[int]string{0: "10:1a", 1: "10:1a", 2: "a0:1a", 3: "a0:1a", 4: "20:19", 5: "20:19", 6: "90:19", 7: "90:19",
			8: "20:1a", 9: "20:1a", 10: "90:1a", 11: "90:1a", 12: "10:19", 13: "10:19", 14: "a0:19", 15: "a0:19"}
		ns := topo.Of(topology.KindNeuron)
		require.Len(t, ns, 16)
		for _, n := range ns {
			efas := topo.Closest(n)
			require.Len(t, efas, 1, n.Name)
			assert.Equal(t, "0000:"+want[n.NeuronIndex]+".0", efas[0].PCI.Address.String(), n.Name)
		}
		e := topo.Lookup(mustAddr(t, "0000:10:19.0"))
		require.NotNil(t, e)
		assert.Equal(t, []string{"NEURON12", "NEURON13"}, names(topo.Closest(e)))
		require.NotNil(t, e.Groups)
		assert.Equal(t, "0000:10:19.0", e.Groups.Group1)
		assert.Equal(t, "178a9e264a26793e", e.Groups.Group4)
		assert.Equal(t, "aa86c05423d6e8cd", e.Groups.Group8)
		assert.Equal(t, "fb838249c99a6341", e.Groups.Group16)
		// A Neuron device and its EFA agree on every group.
		n12 := topo.ByName("NEURON12")
		assert.Equal(t, *e.Groups, *n12.Groups)
		// Group 16 is one value for the whole machine.
		for _, d := range topo.Devices {
			require.NotNil(t, d.Groups, d.Name)
			assert.Equal(t, "fb838249c99a6341", d.Groups.Group16)
		}
		assert.Empty(t, topo.Notes)
	})
	t.Run("trn1n: one EFA per Neuron device, the trn1n table", func(t *testing.T) {
		topo := scan(t, "trn1n.32xlarge")
		want := []string{"10:17", "10:1a", "a0:17", "a0:1a", "20:19", "20:18", "90:19", "90:18", "20:17", "20:1a", "90:17", "90:1a", "10:19", "10:18", "a0:19", "a0:18"}
		ns := topo.Of(topology.KindNeuron)
		require.Len(t, ns, 16)
		for _, n := range ns {
			efas := topo.Closest(n)
			require.Len(t, efas, 1, n.Name)
			assert.Equal(t, "0000:"+want[n.NeuronIndex]+".0", efas[0].PCI.Address.String(), n.Name)
			assert.Equal(t, []string{n.Name}, names(topo.Closest(efas[0])))
			assert.Equal(t, *n.Groups, *efas[0].Groups)
		}
		assert.Len(t, topo.Of(topology.KindEFA), 16)
		assert.Empty(t, topo.Notes)
	})
	t.Run("trn2: one EFA per Neuron device, same switch", func(t *testing.T) {
		topo := scan(t, "trn2.48xlarge")
		efaBus := []int{0xc9, 0xb4, 0xb3, 0xca, 0x6c, 0x57, 0x56, 0x6d, 0x98, 0x83, 0x82, 0x99, 0xf5, 0xe0, 0xdf, 0xf6}
		for _, n := range topo.Of(topology.KindNeuron) {
			efas := topo.Closest(n)
			require.Len(t, efas, 1)
			assert.Equal(t, efaBus[n.NeuronIndex], int(efas[0].PCI.Address.Bus))
			assert.Equal(t, topology.LinkPXB, topo.Link(n, efas[0]))
			assert.Equal(t, n.Groups.Group4, efas[0].Groups.Group4)
		}
		assert.Empty(t, topo.Notes)
	})
	t.Run("g5: no NUMA, un-renamed EFA", func(t *testing.T) {
		topo := scan(t, "g5.8xlarge")
		e := topo.ByName("efa_0")
		require.NotNil(t, e)
		assert.Equal(t, []string{"GPU0"}, names(topo.Closest(e)))
		s, ok := topo.StandardAttributes(e)
		require.True(t, ok)
		assert.Nil(t, s.NUMANode)
		assert.Nil(t, e.Groups)
	})
}

func mustAddr(t *testing.T, s string) (a pcie.Address) {
	t.Helper()
	require.NoError(t, a.UnmarshalText([]byte(s)))
	return a
}

// TestNeuronNotes: an unknown instance type gives no groups and a note; a
// Neuron function missing from the tree leaves only that device out.
func TestNeuronNotes(t *testing.T) {
	t.Parallel()
	r, err := sysfs.OpenCapture("../testdata/sysfs/trn1.32xlarge.sysfs")
	require.NoError(t, err)
	base := r.ReadLinkFS.(*sysfs.MemFS).Entries()
	edit := func(f func(p string, e *sysfs.Entry) bool) *sysfs.MemFS {
		var es []sysfs.Entry
		for _, e := range base {
			if f(e.Path, &e) {
				es = append(es, e)
			}
		}
		m, err := sysfs.NewMemFS(es)
		require.NoError(t, err)
		return m
	}
	unknown := edit(func(p string, e *sysfs.Entry) bool {
		if strings.HasSuffix(p, "dmi/id/product_name") {
			e.Data = []byte("trn9.metal\n")
		}
		return true
	})
	topo, err := topology.Scan(unknown)
	require.NoError(t, err, "an unknown instance type is a note, not an error")
	for _, d := range topo.Devices {
		assert.Nil(t, d.Groups)
	}
	require.Len(t, topo.Notes, 1)
	assert.Contains(t, topo.Notes[0], "trn9.metal")
	assert.Len(t, topo.Of(topology.KindNeuron), 16)

	noDMI := edit(func(p string, _ *sysfs.Entry) bool { return !strings.HasSuffix(p, "dmi/id/product_name") })
	topo, err = topology.Scan(noDMI)
	require.NoError(t, err)
	assert.Contains(t, strings.Join(topo.Notes, "\n"), "no instance type")

	// Neuron device 5 sits at 20:1c.0: take its function away.
	missing := edit(func(p string, _ *sysfs.Entry) bool {
		return !strings.Contains(p, "0000:20:1c.0")
	})
	topo, err = topology.Scan(missing)
	require.NoError(t, err)
	assert.Nil(t, topo.ByName("NEURON5"))
	assert.NotNil(t, topo.ByName("NEURON4"))
	assert.Contains(t, strings.Join(topo.Notes, "\n"), "Neuron device 5 should be at 0000:20:1c.0")
	assert.Len(t, topo.Of(topology.KindNeuron), 15)
	// The EFA of devices 4 and 5 keeps its groups through device 4.
	e := topo.Lookup(mustAddr(t, "0000:20:19.0"))
	require.NotNil(t, e.Groups)
}

func TestPCILinkClasses(t *testing.T) {
	t.Parallel()
	b := fakesys.New()
	br := func(addr, parent string) {
		b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, NUMA: 0, CPUs: "0"})
	}
	ep := func(addr, parent string, numa int) {
		b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: 0x10de, Device: 0x2330, Class: 0x030200, NUMA: numa, CPUs: "0"})
	}
	br("0000:10:00.0", "")
	br("0000:11:00.0", "0000:10:00.0")
	br("0000:12:01.0", "0000:11:00.0")
	br("0000:12:02.0", "0000:11:00.0")
	ep("0000:13:00.0", "0000:12:01.0", 0)
	ep("0000:13:00.1", "0000:12:01.0", 0)
	ep("0000:14:00.0", "0000:12:02.0", 0)
	ep("0000:10:05.0", "", 0)
	ep("0000:20:00.0", "", 0)
	ep("0000:30:00.0", "", 1)
	ep("0000:40:00.0", "", -1)
	topo, err := topology.Scan(b.FS())
	require.NoError(t, err)
	by := func(a string) *topology.Device { return topo.Lookup(mustAddr(t, a)) }
	for _, tc := range []struct {
		a, b string
		want topology.Link
	}{
		{"0000:13:00.0", "0000:13:00.1", topology.LinkPIX},
		{"0000:13:00.0", "0000:14:00.0", topology.LinkPXB},
		{"0000:13:00.0", "0000:10:05.0", topology.LinkPHB},
		{"0000:13:00.0", "0000:20:00.0", topology.LinkNode},
		{"0000:13:00.0", "0000:30:00.0", topology.LinkSys},
		{"0000:13:00.0", "0000:40:00.0", topology.LinkNode},
	} {
		assert.Equal(t, tc.want, topo.Link(by(tc.a), by(tc.b)), "%s-%s", tc.a, tc.b)
		assert.Equal(t, tc.want, topo.Link(by(tc.b), by(tc.a)), "%s-%s", tc.b, tc.a)
	}
	assert.True(t, slices.IsSorted([]topology.Link{topology.LinkSelf, topology.LinkPIX, topology.LinkPXB, topology.LinkPHB, topology.LinkNode, topology.LinkSys}))
}

// TestScanReadsOnce: the whole topology (PCI, EFA, host, Neuron class) asks
// each question of sysfs once.
func TestScanReadsOnce(t *testing.T) {
	t.Parallel()
	for name, path := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(path)
			require.NoError(t, err)
			c := testfixture.NewCountFS(root)
			_, err = topology.Scan(c)
			require.NoError(t, err)
			for k, n := range c.Calls() {
				assert.Equal(t, 1, n, "%s asked %d times", k, n)
			}
		})
	}
}

// TestNUMAFromLocalCPUs: an EFA whose numa_node cannot be read, damaged or
// absent, is on the node whose CPUs its local_cpulist names exactly: SYS
// to the other socket's GPU, as hwloc places it, with the read error still
// returned. A list that is every CPU (the kernel's answer for no node) or
// no node's leaves it unknown.
func TestNUMAFromLocalCPUs(t *testing.T) {
	t.Parallel()
	build := func(numa func(b *fakesys.Builder, file string), cpus string) (*topology.Topology, error) {
		b := fakesys.New()
		b.NUMANodes(32, "0-3,8-11", "4-7,12-15")
		b.AddPCI(fakesys.PCI{Addr: "0000:10:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200, NUMA: 0, CPUs: "0-3,8-11"})
		b.AddPCI(fakesys.PCI{Addr: "0000:90:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200, NUMA: 1, CPUs: "4-7,12-15"})
		dir := b.AddPCI(fakesys.PCI{Addr: "0000:a0:00.0", Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 1, CPUs: cpus})
		b.AddEFA(fakesys.EFA{Addr: "0000:a0:00.0", IBName: "rdmap160s0", Rate: "200 Gb/sec (4X HDR)", NodeGUID: "0000:0000:0000:0001"})
		numa(b, dir+"/numa_node")
		return topology.Scan(b.FS())
	}
	unreadable := func(b *fakesys.Builder, f string) { b.FileMode(f, "1\n", 0o200) }
	damaged := func(b *fakesys.Builder, f string) { b.Attr(f, "one") }
	absent := func(b *fakesys.Builder, f string) { b.Remove(f) }
	for _, tc := range []struct {
		name    string
		numa    func(*fakesys.Builder, string)
		cpus    string
		want    int
		wantErr string
	}{
		{"unreadable", unreadable, "4-7,12-15", 1, "permission denied"},
		{"damaged", damaged, "4-7,12-15", 1, `"one" is not a NUMA node`},
		{"absent", absent, "4-7,12-15", 1, ""},
		{"every CPU", unreadable, "0-15", pcie.NoNUMA, "permission denied"},
		{"no node's CPUs", unreadable, "4-7", pcie.NoNUMA, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo, err := build(tc.numa, tc.cpus)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "0000:a0:00.0")
				assert.Contains(t, err.Error(), "numa_node")
				assert.Contains(t, err.Error(), tc.wantErr)
			}
			efa := topo.ByName("rdmap160s0")
			require.NotNil(t, efa)
			assert.Equal(t, tc.want, efa.NUMANode())
			gpu0, gpu1 := topo.ByName("GPU0"), topo.ByName("GPU1")
			std, ok := topo.StandardAttributes(efa)
			require.True(t, ok)
			if tc.want == pcie.NoNUMA {
				assert.Equal(t, topology.LinkNode, topo.Link(efa, gpu0), "an unknown node is NODE to every GPU")
				assert.Nil(t, std.NUMANode)
				return
			}
			assert.Equal(t, topology.LinkSys, topo.Link(efa, gpu0), "the other socket's GPU")
			assert.Equal(t, topology.LinkNode, topo.Link(efa, gpu1))
			require.NotNil(t, std.NUMANode)
			assert.Equal(t, 1, *std.NUMANode)
		})
	}
}

// onlyOpen is an fs.FS that is nothing more: no links, no ReadDir.
type onlyOpen struct{ fs.FS }

func (o onlyOpen) Open(name string) (fs.File, error) { return o.FS.Open(name) }

// TestScanAnyFS: every entry point takes an fs.FS. os.DirFS of an
// unpacked capture gives what the confined root gives; a root that cannot
// read links, or that is no sysfs at all, is an error, never a panic.
func TestScanAnyFS(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture("../testdata/sysfs/p4d.24xlarge.sysfs")
	require.NoError(t, err)
	want, err := topology.Scan(root)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "sys")
	require.NoError(t, sysfs.WriteDir(dir, root.ReadLinkFS.(*sysfs.MemFS).Entries()))
	got, err := topology.Scan(os.DirFS(dir))
	require.NoError(t, err)
	require.Len(t, got.Devices, len(want.Devices))
	for i, d := range want.Devices {
		assert.Equal(t, d.Name, got.Devices[i].Name)
		assert.Equal(t, names(want.Closest(d)), names(got.Closest(got.Devices[i])), d.Name)
	}

	topo, err := topology.Scan(onlyOpen{os.DirFS(dir)})
	require.Error(t, err, "bus/pci/devices holds links")
	assert.Empty(t, topo.Of(topology.KindEFA))
	topo, err = topology.Scan(os.DirFS(t.TempDir()))
	require.Error(t, err, "not a sysfs root")
	assert.Nil(t, topo.Closest(topo.ByName("GPU3")))
}

// TestScanReadsEveryAttribute: what Scan returns is read whole. On every
// bundled machine, each device's function and the bridges above it have
// their PCIe links, IOMMU group and revision wherever the files are, and
// each EFA its firmware version (empty on EFAs: the files say "\n") and
// gdr file: no zero value stands for a file that was there but not read.
func TestScanReadsEveryAttribute(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.OpenCapture(f)
			require.NoError(t, err)
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			has := func(p string) bool { _, err := fs.Lstat(root, p); return err == nil }
			checked := 0
			for _, d := range topo.Devices {
				for p := d.PCI; p != nil; p = p.Parent {
					if has(p.Path + "/current_link_speed") {
						assert.NotNil(t, p.CurrentLink, "%s: current link", p.Address)
						assert.NotNil(t, p.MaxLink, "%s: max link", p.Address)
						checked++
					}
					if has(p.Path + "/iommu_group") {
						assert.NotEqual(t, pcie.NoIOMMUGroup, p.IOMMUGroup, "%s: IOMMU group", p.Address)
						checked++
					}
					if b, err := fs.ReadFile(root, p.Path+"/revision"); err == nil {
						v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 8)
						require.NoError(t, err)
						assert.Equal(t, uint8(v), p.Revision, "%s: revision", p.Address)
						checked++
					}
				}
				if e := d.EFA; e != nil {
					if b, err := fs.ReadFile(root, e.IBPath+"/fw_ver"); err == nil {
						assert.Equal(t, strings.TrimSpace(string(b)), e.FirmwareVer, "%s: fw_ver", e.Name)
						checked++
					}
					if has(e.PCI.Path + "/gdr") {
						assert.NotNil(t, e.GDR, "%s: gdr", e.Name)
						checked++
					}
				}
			}
			if len(topo.Devices) > 0 {
				assert.Positive(t, checked, "no attribute file found: the test reads the wrong paths")
			}
		})
	}
}
