package efa_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// fixtures are the capture files under testdata/sysfs, by instance type.
func fixtures(t testing.TB) map[string]string { return testfixture.Captures(t, "..") }

func open(t testing.TB, path string) *sysfs.Root {
	t.Helper()
	r, err := sysfs.Open(path)
	require.NoError(t, err)
	return r
}

// goldenPCI is the whole PCI tree in a form a reviewer can read.
type goldenPCI struct {
	Address   string `json:"address"`
	Path      string `json:"path"`
	Root      string `json:"root"`
	Parent    string `json:"parent,omitempty"`
	ID        string `json:"id"`
	Subsystem string `json:"subsystem"`
	Class     string `json:"class"`
	Revision  uint8  `json:"revision"`
	Driver    string `json:"driver,omitempty"`
	NUMA      int    `json:"numa"`
	CPUs      string `json:"cpus"`
}

type goldenEFA struct {
	Name       string     `json:"name"`
	PCI        string     `json:"pci"`
	Generation string     `json:"generation"`
	IBPath     string     `json:"ibPath"`
	NodeGUID   string     `json:"nodeGUID"`
	SysImage   string     `json:"sysImageGUID"`
	FwVer      string     `json:"fwVer"`
	Ports      []efa.Port `json:"ports"`
	Verbs      *efa.Verbs `json:"verbs"`
	Netdev     string     `json:"netdev"`
	P2P        string     `json:"p2p"`
	Bridges    []string   `json:"bridges"`
}

type golden struct {
	PCI      []goldenPCI `json:"pci"`
	EFAs     []goldenEFA `json:"efas"`
	Inactive []string    `json:"inactive"`
}

func makeGolden(tree *pcie.Tree, res *efa.Result) golden {
	g := golden{PCI: []goldenPCI{}, EFAs: []goldenEFA{}, Inactive: []string{}}
	for _, d := range tree.Devices {
		p := goldenPCI{
			Address: d.Address.String(), Path: d.Path, Root: d.Root,
			ID:        fmt.Sprintf("%04x:%04x", d.Vendor, d.Device),
			Subsystem: fmt.Sprintf("%04x:%04x", d.SubsystemVendor, d.SubsystemDevice),
			Class:     d.Class.String(), Revision: d.Revision, Driver: d.Driver, NUMA: d.NUMANode, CPUs: d.LocalCPUs.String(),
		}
		if d.Parent != nil {
			p.Parent = d.Parent.Address.String()
		}
		g.PCI = append(g.PCI, p)
	}
	for _, d := range res.EFAs {
		e := goldenEFA{Name: d.Name, PCI: d.PCI.Address.String(), Generation: d.Generation.String(), IBPath: d.IBPath,
			NodeGUID: d.NodeGUID, SysImage: d.SysImageGUID, FwVer: d.FirmwareVer, Ports: d.Ports, Verbs: d.Verbs,
			Netdev: d.Netdev, P2P: d.P2P, Bridges: []string{}}
		for _, b := range d.PCI.Bridges() {
			e.Bridges = append(e.Bridges, b.Address.String())
		}
		g.EFAs = append(g.EFAs, e)
	}
	for _, d := range res.Inactive {
		g.Inactive = append(g.Inactive, d.Address.String())
	}
	return g
}

// TestGolden compares the whole discovery of every fixture with its golden
// file. Run with -update after a deliberate change, and read the diff.
func TestGolden(t *testing.T) {
	t.Parallel()
	for name, path := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := open(t, path)
			tree, res, err := efa.Scan(root)
			require.NoError(t, err)
			got, err := json.MarshalIndent(makeGolden(tree, res), "", " ")
			require.NoError(t, err)
			got = append(got, '\n')
			file := filepath.Join("..", "testdata", "golden", name+".discover.json")
			if *update {
				require.NoError(t, os.WriteFile(file, got, 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test ./efa -update to create it")
			assert.Equal(t, strings.Split(string(want), "\n"), strings.Split(string(got), "\n"), "%s differs from the golden file", name)
		})
	}
}

// byName indexes EFAs by RDMA device name.
func byName(ds []*efa.Device) map[string]*efa.Device {
	m := map[string]*efa.Device{}
	for _, d := range ds {
		m[d.Name] = d
	}
	return m
}

// TestHardwareFacts checks discovery against docs/hardware.md, written out
// here by hand rather than taken from a golden file.
func TestHardwareFacts(t *testing.T) {
	t.Parallel()
	scan := func(name string) *efa.Result {
		_, res, err := efa.Scan(open(t, "../testdata/sysfs/"+name+".sysfs"))
		require.NoError(t, err)
		return res
	}
	t.Run("p4d", func(t *testing.T) {
		res := scan("p4d.24xlarge")
		want := map[string]struct {
			pci, root string
			numa      int
		}{
			"rdmap16s27": {"0000:10:1b.0", "pci0000:10", 0}, "rdmap32s27": {"0000:20:1b.0", "pci0000:20", 0},
			"rdmap144s27": {"0000:90:1b.0", "pci0000:90", 1}, "rdmap160s27": {"0000:a0:1b.0", "pci0000:a0", 1},
		}
		require.Len(t, res.EFAs, 4)
		for i, d := range res.EFAs {
			w, ok := want[d.Name]
			require.True(t, ok, d.Name)
			assert.Equal(t, w.pci, d.PCI.Address.String())
			assert.Equal(t, w.root, d.PCI.Root)
			assert.Equal(t, w.numa, d.PCI.NUMANode)
			assert.Equal(t, "efa0", d.Generation.String())
			assert.Empty(t, d.PCI.Bridges(), "no switches on p4d")
			assert.Equal(t, "0000:0000:0000:0000", d.NodeGUID)
			assert.Equal(t, float64(100), d.Ports[0].RateGbps)
			assert.Equal(t, fmt.Sprintf("uverbs%d", i), d.Verbs.Name, "uverbs follow bus order")
		}
	})
	t.Run("p5", func(t *testing.T) {
		res := scan("p5.48xlarge")
		require.Len(t, res.EFAs, 32)
		m := byName(res.EFAs)
		// GPU k's four EFAs: table of docs/hardware.md.
		firstBus := []int{0x4f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6}
		for k, fb := range firstBus {
			for j := range 4 {
				bus := fb + j
				d := m[fmt.Sprintf("rdmap%ds0", bus)]
				require.NotNil(t, d, "EFA on bus %x", bus)
				assert.Equal(t, fmt.Sprintf("0000:%02x:00.0", bus), d.PCI.Address.String())
				assert.Equal(t, fmt.Sprintf("pci0000:%02x", 0x44+0x11*k), d.PCI.Root)
				assert.Equal(t, k/4, d.PCI.NUMANode)
				assert.Equal(t, "efa1", d.Generation.String())
				assert.Equal(t, uint32(231), d.Verbs.Major)
				assert.Equal(t, uint32(192+4*k+j), d.Verbs.Minor)
				assert.Len(t, d.PCI.Bridges(), 3, "root port, switch upstream port, downstream port")
			}
		}
		assert.Equal(t, "0-47,96-143", m["rdmap79s0"].PCI.LocalCPUs.String())
	})
	t.Run("p5en", func(t *testing.T) {
		res := scan("p5en.48xlarge")
		require.Len(t, res.EFAs, 16)
		m := byName(res.EFAs)
		for k, fb := range []int{85, 110, 135, 160} {
			for j := range 4 {
				d := m[fmt.Sprintf("rdmap%ds0", fb+j)]
				require.NotNil(t, d)
				assert.Equal(t, "efa2", d.Generation.String())
				assert.Equal(t, float64(200), d.Ports[0].RateGbps)
				assert.Equal(t, fmt.Sprintf("0000:%02x:00.0", fb+j), d.PCI.Address.String())
				assert.Equal(t, []string{"pci0000:44", "pci0000:5d", "pci0000:76", "pci0000:8f"}[k], d.PCI.Root)
			}
		}
	})
	t.Run("p6-b200", func(t *testing.T) {
		res := scan("p6-b200.48xlarge")
		require.Len(t, res.EFAs, 8, "the two mlx5 devices are not EFA")
		m := byName(res.EFAs)
		assert.Contains(t, m, "rdmap79s0")
		assert.Contains(t, m, "rdmap80s0")
		for _, d := range res.EFAs {
			assert.NotContains(t, d.Name, "ibp")
			assert.Equal(t, float64(400), d.Ports[0].RateGbps)
		}
	})
	t.Run("trn1", func(t *testing.T) {
		res := scan("trn1.32xlarge")
		var got []string
		for _, d := range res.EFAs {
			got = append(got, d.PCI.Address.String()+"="+d.Name)
		}
		assert.Equal(t, []string{
			"0000:10:19.0=rdmap16s25", "0000:10:1a.0=rdmap16s26", "0000:20:19.0=rdmap32s25", "0000:20:1a.0=rdmap32s26",
			"0000:90:19.0=rdmap144s25", "0000:90:1a.0=rdmap144s26", "0000:a0:19.0=rdmap160s25", "0000:a0:1a.0=rdmap160s26",
		}, got)
	})
	t.Run("trn2", func(t *testing.T) {
		res := scan("trn2.48xlarge")
		require.Len(t, res.EFAs, 16)
		m := byName(res.EFAs)
		for _, bus := range []int{0xc9, 0xb4, 0xb3, 0xca, 0x6c, 0x57, 0x56, 0x6d, 0x98, 0x83, 0x82, 0x99, 0xf5, 0xe0, 0xdf, 0xf6} {
			d := m[fmt.Sprintf("rdmap%ds0", bus)]
			require.NotNil(t, d, "bus %x", bus)
			want := 0
			if bus >= 0xb3 {
				want = 1
			}
			assert.Equal(t, want, d.PCI.NUMANode, "bus %x", bus)
		}
	})
	t.Run("g5 single EFA, no NUMA, not renamed", func(t *testing.T) {
		res := scan("g5.8xlarge")
		require.Len(t, res.EFAs, 1)
		assert.Equal(t, "efa_0", res.EFAs[0].Name)
		assert.Equal(t, pcie.NoNUMA, res.EFAs[0].PCI.NUMANode)
	})
	t.Run("m5 no EFA", func(t *testing.T) {
		res := scan("m5.xlarge")
		assert.Empty(t, res.EFAs)
		assert.Empty(t, res.Inactive)
	})
}

// TestDirAndCaptureAgree runs every fixture both from memory and unpacked on
// disk (through openat2): the same code, the same answers.
func TestDirAndCaptureAgree(t *testing.T) {
	t.Parallel()
	for name, path := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := open(t, path)
			mt, mres, err := efa.Scan(root)
			require.NoError(t, err)
			dir := filepath.Join(t.TempDir(), "sys")
			require.NoError(t, sysfs.WriteDir(dir, root.ReadLinkFS.(*sysfs.MemFS).Entries()))
			d, err := sysfs.Open(dir)
			require.NoError(t, err)
			defer d.Close()
			dt, dres, err := efa.Scan(d)
			require.NoError(t, err)
			assert.Equal(t, makeGolden(mt, mres), makeGolden(dt, dres))
		})
	}
}

// TestLiveSysfs reads this machine's own /sys: it has PCI functions, and
// every EFA found must be an RDMA device of the efa driver.
func TestLiveSysfs(t *testing.T) {
	t.Parallel()
	root, err := sysfs.Open("/sys")
	require.NoError(t, err)
	defer root.Close()
	tree, res, err := efa.Scan(root)
	require.NoError(t, err)
	assert.NotEmpty(t, tree.Devices, "a Linux machine has PCI functions")
	live := liveRDMAEFAs(t)
	var got []string
	for _, d := range res.EFAs {
		got = append(got, d.Name)
	}
	assert.ElementsMatch(t, live, got)
	t.Logf("%d PCI functions, %d EFAs", len(tree.Devices), len(res.EFAs))
}
