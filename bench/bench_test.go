package bench

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jaypipes/ghw"
	procsysfs "github.com/prometheus/procfs/sysfs"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// fixtureNames are the captures under ../testdata/sysfs that are measured:
// all of them.
var fixtureNames = func() []string {
	m, _ := filepath.Glob(filepath.Join("..", "testdata", "sysfs", "*.sysfs"))
	var names []string
	for _, p := range m {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".sysfs"))
	}
	return names
}()

// fixture is one capture, opened twice over the same content: in memory,
// and unpacked to <chroot>/sys, the tree ghw and procfs read too.
type fixture struct {
	name   string
	mem    *sysfs.Root // sysfs.OpenCapture
	dir    *sysfs.Root // sysfs.Open(sysDir)
	chroot string      // ghw's chroot: sysDir is chroot/sys
	sysDir string      // the unpacked capture
	pciIDs string      // chroot/usr/share/hwdata/pci.ids, written by setup

	// What efa.Scan finds on mem, to check the others against.
	tree *pcie.Tree
	res  *efa.Result
	// rdmaNames are all RDMA devices of class/infiniband: the EFAs and
	// any other (mlx5...).
	rdmaNames []string
}

// fixtures is filled by TestMain, once per test binary, so that every test
// and benchmark reads the very same unpacked tree.
var fixtures []*fixture

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "efakit-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench setup:", err)
		return 1
	}
	defer removeTree(tmp)
	for _, name := range fixtureNames {
		fx, err := setup(tmp, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench setup %s: %v\n", name, err)
			return 1
		}
		defer fx.mem.Close()
		defer fx.dir.Close()
		fixtures = append(fixtures, fx)
	}
	return m.Run()
}

func setup(tmp, name string) (*fixture, error) {
	capture := filepath.Join("..", "testdata", "sysfs", name+".sysfs")
	fx := &fixture{name: name, chroot: filepath.Join(tmp, name)}
	fx.sysDir = filepath.Join(fx.chroot, "sys")
	fx.pciIDs = filepath.Join(fx.chroot, "usr", "share", "hwdata", "pci.ids")

	var err error
	if fx.mem, err = sysfs.OpenCapture(capture); err != nil {
		return nil, err
	}
	f, err := os.Open(capture)
	if err != nil {
		return nil, err
	}
	entries, err := sysfs.ParseCapture(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if err := sysfs.WriteDir(fx.sysDir, entries); err != nil {
		return nil, err
	}
	if fx.dir, err = sysfs.Open(fx.sysDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(fx.pciIDs), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(fx.pciIDs, []byte(pciIDs()), 0o644); err != nil {
		return nil, err
	}

	if fx.tree, fx.res, err = efa.Scan(fx.mem); err != nil {
		return nil, fmt.Errorf("efa.Scan on the capture: %w", err)
	}
	ents, err := fs.ReadDir(fx.mem, "class/infiniband")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		fx.rdmaNames = append(fx.rdmaNames, e.Name())
	}
	return fx, nil
}

// removeTree deletes an unpacked tree, first making its directories
// writable: WriteDir applies the captured permission bits.
func removeTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// A small pci.ids: the functions of the fixtures and a few more of the
// same vendors, nothing else.
type pciProduct struct {
	id   uint16
	name string
}

type pciVendor struct {
	id       uint16
	name     string
	products []pciProduct
}

type pciProgIf struct {
	id   uint8
	name string
}

type pciSubclass struct {
	id      uint8
	name    string
	progIfs []pciProgIf
}

type pciClass struct {
	id         uint8
	name       string
	subclasses []pciSubclass
}

var pciVendors = []pciVendor{
	{0x10de, "NVIDIA Corporation", []pciProduct{
		{0x22a3, "GH100 [H100 NVSwitch]"},
		{0x1af1, "GA100 [A100 NVSwitch]"},
		{0x20b0, "GA100 [A100 SXM4 40GB]"},
		{0x20b2, "GA100 [A100 SXM4 80GB]"},
		{0x2237, "GA102GL [A10G]"},
		{0x2330, "GH100 [H100 SXM5 80GB]"},
		{0x2335, "GH100 [H200 SXM 141GB]"},
		{0x2901, "GB100 [B200]"},
	}},
	{0x15b3, "Mellanox Technologies", []pciProduct{
		{0x101d, "MT2892 Family [ConnectX-6 Dx]"},
		{0x1021, "MT2910 Family [ConnectX-7]"},
	}},
	{0x1d0f, "Amazon.com, Inc.", []pciProduct{
		{0x0200, "PCIe switch port"},
		{0x1111, "VGA controller"},
		{0x7164, "NeuronDevice (Trainium)"},
		{0x7364, "NeuronDevice (Trainium2)"},
		{0x8061, "NVMe EBS Controller"},
		{0xcd01, "NVMe SSD Controller"},
		{0xec20, "Elastic Network Adapter (ENA)"},
		{0xefa0, "Elastic Fabric Adapter (EFA)"},
		{0xefa1, "Elastic Fabric Adapter (EFA)"},
		{0xefa2, "Elastic Fabric Adapter (EFA)"},
		{0xefa3, "Elastic Fabric Adapter (EFA)"},
	}},
	{0x8086, "Intel Corporation", []pciProduct{
		{0x1237, "440FX - 82441FX PMC [Natoma]"},
	}},
}

var pciClasses = []pciClass{
	{0x01, "Mass storage controller", []pciSubclass{
		{0x08, "Non-Volatile memory controller", []pciProgIf{{0x02, "NVM Express"}}},
	}},
	{0x02, "Network controller", []pciSubclass{
		{0x00, "Ethernet controller", nil},
		{0x07, "Infiniband controller", nil},
	}},
	{0x03, "Display controller", []pciSubclass{
		{0x00, "VGA compatible controller", []pciProgIf{{0x00, "VGA controller"}}},
		{0x02, "3D controller", nil},
	}},
	{0x06, "Bridge", []pciSubclass{
		{0x00, "Host bridge", nil},
		{0x04, "PCI bridge", []pciProgIf{{0x00, "Normal decode"}}},
		{0x80, "Bridge", nil},
	}},
	{0x08, "Generic system peripheral", []pciSubclass{
		{0x80, "System peripheral", nil},
	}},
	{0x12, "Processing accelerators", []pciSubclass{
		{0x00, "Processing accelerators", nil},
	}},
}

// pciIDs renders pciVendors and pciClasses in pci.ids format, as
// jaypipes/pcidb v1.1.1 (internal/parse.go) reads it: IDs in lower-case
// hex (ghw lower-cases the modalias IDs it looks up), two spaces between
// ID and name, one tab before a device or subclass, two before a
// programming interface, "C " before a class.
func pciIDs() string {
	var b strings.Builder
	b.WriteString("# Synthetic pci.ids written by github.com/efakit/efakit/bench: a few\n")
	b.WriteString("# vendors and classes, enough to name the functions of the fixtures.\n\n")
	for _, v := range pciVendors {
		fmt.Fprintf(&b, "%04x  %s\n", v.id, v.name)
		for _, p := range v.products {
			fmt.Fprintf(&b, "\t%04x  %s\n", p.id, p.name)
		}
	}
	b.WriteString("\n# List of known device classes, subclasses and programming interfaces\n\n")
	for _, c := range pciClasses {
		fmt.Fprintf(&b, "C %02x  %s\n", c.id, c.name)
		for _, s := range c.subclasses {
			fmt.Fprintf(&b, "\t%02x  %s\n", s.id, s.name)
			for _, pi := range s.progIfs {
				fmt.Fprintf(&b, "\t\t%02x  %s\n", pi.id, pi.name)
			}
		}
	}
	// pcidb attaches a class's subclasses when the next "C" line starts and
	// a subclass's programming interfaces when the next subclass starts, so
	// the last class of a file keeps none: end with a class nobody uses.
	b.WriteString("C ff  Unassigned class\n\tff  Unassigned subclass\n")
	return b.String()
}

// ghwPCI runs ghw's PCI discovery on fx the way it is meant to be pointed
// at a mounted host tree: chroot, no external tools. ghw v0.27.0 does not
// pass the chroot to pcidb (pkg/pci/pci_linux.go calls pcidb.New with only
// $PCIDB_PATH), so the caller sets PCIDB_PATH to the chroot's pci.ids;
// pcidb then looks nowhere else, and its network fetch is off by default.
func ghwPCI(fx *fixture, logger *slog.Logger, extra ...any) (*ghw.PCIInfo, error) {
	args := append([]any{ghw.WithChroot(fx.chroot), ghw.WithDisableTools(), ghw.WithLogger(logger)}, extra...)
	return ghw.PCI(args...)
}

// setPCIDB points ghw's pcidb at fx's pci.ids and keeps network fetch off.
func setPCIDB(tb testing.TB, fx *fixture) {
	tb.Setenv("PCIDB_PATH", fx.pciIDs)
	tb.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "0")
}

var quiet = slog.New(slog.DiscardHandler)

// --- tests ---

// TestCompareSetup checks that the in-memory capture and its unpacked
// directory give efa.Scan the same result.
func TestCompareSetup(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			mt, mr, err := efa.Scan(fx.mem)
			if err != nil {
				t.Fatalf("mem: %v", err)
			}
			dt, dr, err := efa.Scan(fx.dir)
			if err != nil {
				t.Fatalf("dir: %v", err)
			}
			if len(mt.Devices) != len(dt.Devices) {
				t.Errorf("PCI functions: mem %d, dir %d", len(mt.Devices), len(dt.Devices))
			}
			for i := range min(len(mt.Devices), len(dt.Devices)) {
				if a, b := mt.Devices[i], dt.Devices[i]; a.Address != b.Address || a.Path != b.Path || a.Driver != b.Driver {
					t.Errorf("function %d: mem %s %s %q, dir %s %s %q", i, a.Address, a.Path, a.Driver, b.Address, b.Path, b.Driver)
				}
			}
			if got, want := efaKeys(dr), efaKeys(mr); !slices.Equal(got, want) {
				t.Errorf("EFAs:\ndir %v\nmem %v", got, want)
			}
			if len(mr.EFAs) == 0 && len(fx.rdmaNames) > 0 {
				t.Error("no EFA, though the capture has RDMA devices")
			}
			t.Logf("%d PCI functions, %d EFAs, %d inactive EFA functions", len(mt.Devices), len(mr.EFAs), len(mr.Inactive))
		})
	}
}

func efaKeys(r *efa.Result) []string {
	var out []string
	for _, d := range r.EFAs {
		out = append(out, d.Name+"@"+d.PCI.Address.String())
	}
	return out
}

// TestGHWSeesSameDevices checks that ghw, pointed at the unpacked tree,
// finds the functions efakit finds, with the same driver and parent, and
// names each from the chroot's pci.ids.
func TestGHWSeesSameDevices(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			setPCIDB(t, fx)
			var logBuf bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			info, err := ghwPCI(fx, logger)
			if err != nil {
				t.Fatalf("ghw.PCI: %v", err)
			}
			for l := range strings.Lines(logBuf.String()) {
				// Warnings from ghw's PCI code itself (pkg/pci/pci_linux.go:
				// unreadable bus/pci/devices, a bad address or modalias)
				// mean it gave up on the tree; the others come from the
				// topology it reads to decide whether to read numa_node.
				if strings.Contains(l, "/sys/bus/pci/devices") || strings.Contains(l, "pci address") || strings.Contains(l, "modalias") {
					t.Errorf("ghw warning: %s", strings.TrimSpace(l))
				} else {
					t.Logf("ghw warning: %s", strings.TrimSpace(l))
				}
			}
			if len(info.Devices) != len(fx.tree.Devices) {
				t.Fatalf("ghw found %d PCI functions, efakit %d", len(info.Devices), len(fx.tree.Devices))
			}
			byAddr := map[string]*pcie.Device{}
			for _, d := range fx.tree.Devices {
				byAddr[d.Address.String()] = d
			}
			const unknown = "unknown"
			var numa int
			for _, g := range info.Devices {
				d := byAddr[g.Address]
				if d == nil {
					t.Errorf("ghw found %s, efakit did not", g.Address)
					continue
				}
				if g.Vendor.ID != fmt.Sprintf("%04x", d.Vendor) || g.Product.ID != fmt.Sprintf("%04x", d.Device) {
					t.Errorf("%s: ghw %s:%s, efakit %04x:%04x", g.Address, g.Vendor.ID, g.Product.ID, d.Vendor, d.Device)
				}
				if g.Driver != d.Driver {
					t.Errorf("%s: driver: ghw %q, efakit %q", g.Address, g.Driver, d.Driver)
				}
				wantParent := ""
				if d.Parent != nil {
					wantParent = d.Parent.Address.String()
				}
				if g.ParentAddress != wantParent {
					t.Errorf("%s: parent: ghw %q, efakit %q", g.Address, g.ParentAddress, wantParent)
				}
				if g.Node != nil {
					numa++
					if g.Node.ID != d.NUMANode {
						t.Errorf("%s: NUMA node: ghw %d, efakit %d", g.Address, g.Node.ID, d.NUMANode)
					}
				}
				for what, name := range map[string]string{
					"vendor": g.Vendor.Name, "product": g.Product.Name,
					"class": g.Class.Name, "subclass": g.Subclass.Name,
				} {
					if name == unknown {
						t.Errorf("%s: ghw found no %s name (%s:%s class %s%s): pci.ids not read or not parsed", g.Address, what, g.Vendor.ID, g.Product.ID, g.Class.ID, g.Subclass.ID)
					}
				}
			}
			var efas int
			for _, g := range info.Devices {
				if g.Vendor.Name == "Amazon.com, Inc." && g.Product.Name == "Elastic Fabric Adapter (EFA)" {
					efas++
				}
			}
			if efas != len(fx.res.EFAs)+len(fx.res.Inactive) {
				t.Errorf("ghw names %d functions EFA, efakit finds %d", efas, len(fx.res.EFAs)+len(fx.res.Inactive))
			}
			t.Logf("ghw: %d PCI functions (efakit %d), %d EFA, %d with a NUMA node", len(info.Devices), len(fx.tree.Devices), efas, numa)
		})
	}
}

// TestGHWPCIDBIgnoresChroot shows why the benchmark sets PCIDB_PATH: with
// only WithChroot, ghw's pcidb looks for pci.ids on the host, not in the
// chroot. Skipped where the host has a pci.ids, which would hide it.
func TestGHWPCIDBIgnoresChroot(t *testing.T) {
	home, _ := os.UserHomeDir()
	for _, p := range []string{
		filepath.Join(home, ".cache", "pci.ids"),
		"/usr/share/hwdata/pci.ids", "/usr/share/misc/pci.ids",
		"/usr/share/hwdata/pci.ids.gz", "/usr/share/misc/pci.ids.gz",
	} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("host has %s", p)
		}
	}
	for _, k := range []string{"PCIDB_PATH", "PCIDB_CHROOT", "PCIDB_CACHE_ONLY"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "0")
	fx := fixtures[0]
	_, err := ghwPCI(fx, quiet)
	if err == nil {
		t.Fatalf("ghw.PCI found a pci.ids although only %s has one: ghw now passes the chroot to pcidb", fx.pciIDs)
	}
	t.Logf("ghw.PCI(WithChroot(%s)) without PCIDB_PATH: %v", fx.chroot, err)
}

// TestProcfsInfiniBand checks that procfs's InfiniBand class reader finds
// the RDMA devices efakit finds, with the same port state and rate.
func TestProcfsInfiniBand(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			pfs, err := procsysfs.NewFS(fx.sysDir)
			if err != nil {
				t.Fatal(err)
			}
			ibc, err := pfs.InfiniBandClass()
			if err != nil {
				t.Fatalf("procfs InfiniBandClass: %v", err)
			}
			nonEFA := 0
			efas := map[string]*efa.Device{}
			for _, d := range fx.res.EFAs {
				efas[d.Name] = d
			}
			for _, n := range fx.rdmaNames {
				if efas[n] == nil {
					nonEFA++
				}
			}
			if want := len(fx.res.EFAs) + nonEFA; len(ibc) != want {
				t.Errorf("procfs found %d InfiniBand devices, efakit %d EFAs + %d other RDMA devices", len(ibc), len(fx.res.EFAs), nonEFA)
			}
			for name, d := range efas {
				p, ok := ibc[name]
				if !ok {
					t.Errorf("procfs did not find EFA %s", name)
					continue
				}
				if p.NodeGUID != d.NodeGUID {
					t.Errorf("%s: node_guid: procfs %q, efakit %q", name, p.NodeGUID, d.NodeGUID)
				}
				if len(p.Ports) != len(d.Ports) {
					t.Errorf("%s: procfs %d ports, efakit %d", name, len(p.Ports), len(d.Ports))
				}
				for _, ep := range d.Ports {
					pp, ok := p.Ports[uint(ep.Number)]
					if !ok {
						t.Errorf("%s: procfs has no port %d", name, ep.Number)
						continue
					}
					if pp.State != ep.State || pp.PhysState != ep.PhysState || pp.LinkLayer != ep.LinkLayer {
						t.Errorf("%s port %d: procfs %s/%s/%s, efakit %s/%s/%s", name, ep.Number, pp.State, pp.PhysState, pp.LinkLayer, ep.State, ep.PhysState, ep.LinkLayer)
					}
					// procfs gives bytes per second: Gb/s * 125000000.
					if want := uint64(ep.RateGbps * 125e6); pp.Rate != want {
						t.Errorf("%s port %d: rate: procfs %d B/s, efakit %g Gb/s", name, ep.Number, pp.Rate, ep.RateGbps)
					}
				}
			}
			t.Logf("procfs: %d InfiniBand devices (efakit %d EFAs, %d other)", len(ibc), len(fx.res.EFAs), nonEFA)
		})
	}
}
