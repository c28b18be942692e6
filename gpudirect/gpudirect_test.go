package gpudirect_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/fixturegen/machines"
	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// proc is a proc root with the kernel release and, unless params is "-",
// the nvidia module's parameters.
func proc(kernel, params string) fstest.MapFS {
	m := fstest.MapFS{}
	if kernel != "" {
		m[gpudirect.KernelReleaseFile] = &fstest.MapFile{Data: []byte(kernel + "\n")}
	}
	if params != "-" {
		m[gpudirect.NVIDIAParamsFile] = &fstest.MapFile{Data: []byte(params)}
	}
	return m
}

const (
	al2023 = "6.1.119-129.201.amzn2023.aarch64"
	al2    = "5.10.228-219.884.amzn2.x86_64"
	// paramsOverride is /proc/driver/nvidia/params in part, with the
	// parameter NVIDIA/aicr's GB200 recipes set.
	paramsOverride = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRegistryDwords: \"\"\nGrdmaPciTopoCheckOverride: 1\n"
	paramsDefault  = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRegistryDwords: \"\"\n"
)

func assess(t *testing.T, m gdrcases.Machine, p fstest.MapFS) gpudirect.Pair {
	t.Helper()
	r := sysread.New(m.Build().FS())
	topo, err := topology.Scan(r.FS())
	require.NoError(t, err)
	pairs, _, err := gpudirect.Judge(r, topo, nilIfEmpty(p))
	require.NoError(t, err)
	require.Len(t, pairs, 1)
	return pairs[0]
}

// nilIfEmpty is no proc root for an empty one.
func nilIfEmpty(p fstest.MapFS) fs.FS {
	if len(p) == 0 {
		return nil
	}
	return p
}

func captures(t *testing.T) map[string]string { return testfixture.Captures(t, "..") }

// finding returns the pair's finding of a check on a path.
func finding(t *testing.T, p gpudirect.Pair, m gpudirect.Method, check string) gpudirect.Finding {
	t.Helper()
	for _, x := range p.Paths {
		if x.Method != m {
			continue
		}
		for _, f := range x.Findings {
			if f.Check == check {
				return f
			}
		}
	}
	t.Fatalf("no %s finding on the %s path", check, m)
	return gpudirect.Finding{}
}

func status(p gpudirect.Pair, m gpudirect.Method) gpudirect.Status {
	for _, x := range p.Paths {
		if x.Method == m {
			return x.Status
		}
	}
	return -1
}

// TestP6e: the GB200/GB300 cases of NVIDIA's topology check. The EFA is in
// no IOMMU group and on another root complex than the GPU, as NVIDIA/aicr
// measured on p6e-gb300r (EFA 0000:97:00.0 under pci0000:84, GPU
// 0000:9d:00.0 in group 0 under pci0000:98).
func TestP6e(t *testing.T) {
	t.Parallel()
	p6e := gdrcases.Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g"}
	for _, tc := range []struct {
		name    string
		m       gdrcases.Machine
		proc    fstest.MapFS
		want    gpudirect.Status
		message string // in the topology check's message
	}{
		{"R595 apart: blocked, no override", withNVIDIA(p6e, "595.91.07"), proc(al2023, paramsOverride), gpudirect.Blocked, "R595 has no override"},
		{"R580 with the override", withNVIDIA(p6e, "580.173.02"), proc(al2023, paramsOverride), gpudirect.Ready, "GrdmaPciTopoCheckOverride: 1"},
		{"R580 without the override", withNVIDIA(p6e, "580.173.02"), proc(al2023, paramsDefault), gpudirect.Blocked, "lacks GrdmaPciTopoCheckOverride=1"},
		{"R580, params not read", withNVIDIA(p6e, "580.173.02"), proc(al2023, "-"), gpudirect.Unknown, "was not read"},
		{"driver version unknown", p6e, proc(al2023, paramsOverride), gpudirect.Unknown, "module/nvidia/version was not read"},
		{"R595, EFA in no group below the GPU's switch", func() gdrcases.Machine { m := withNVIDIA(p6e, "595.91.07"); m.Shared = true; return m }(), proc(al2023, "-"), gpudirect.Ready, "shares bridge 0000:45:00.0"},
		{"R595, one IOMMU group for neither", func() gdrcases.Machine { m := withNVIDIA(p6e, "595.91.07"); m.NoGroup = false; return m }(), proc(al2023, "-"), gpudirect.Blocked, "R595 has no override"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := assess(t, tc.m, tc.proc)
			assert.Equal(t, tc.want, p.Status, "%v", p.Reasons())
			assert.Equal(t, tc.want, status(p, gpudirect.DMABuf))
			f := finding(t, p, gpudirect.DMABuf, gpudirect.CheckNVIDIATopology)
			assert.Contains(t, f.Message, tc.message)
			assert.Equal(t, gpudirect.Blocked, status(p, gpudirect.PeerMemory), "a coherent GPU needs dma-buf")
		})
	}
}

func withNVIDIA(m gdrcases.Machine, v string) gdrcases.Machine {
	m.NVIDIA = v
	return m
}

// TestPeerMemory: the x86 cases (p4d to p5en), where the EFA may also reach
// GPU memory through the efa driver's peer-memory provider.
func TestPeerMemory(t *testing.T) {
	t.Parallel()
	p5 := gdrcases.Machine{Product: "p5.48xlarge", Shared: true, P2P: "NVIDIA", EFAModule: "2.13.0g", NVIDIA: "580.105.08"}
	for _, tc := range []struct {
		name       string
		m          gdrcases.Machine
		proc       fstest.MapFS
		want       gpudirect.Status
		peer       gpudirect.Status
		dmabuf     gpudirect.Status
		reasonPart string
	}{
		{"p2p NVIDIA", p5, proc(al2023, "-"), gpudirect.Ready, gpudirect.Ready, gpudirect.Ready, ""},
		{"p2p NVIDIA peermem, kernel unknown", func() gdrcases.Machine { m := p5; m.P2P = "NVIDIA peermem"; return m }(), nil, gpudirect.Ready, gpudirect.Ready, gpudirect.Unknown, "kernel release not read"},
		{"in-tree efa on AL2", func() gdrcases.Machine { m := p5; m.P2P, m.EFAModule = "", ""; return m }(), proc(al2, "-"), gpudirect.Blocked, gpudirect.Blocked, gpudirect.Blocked, "in-tree efa driver"},
		{"p2p names no provider", func() gdrcases.Machine { m := p5; m.P2P, m.EmptyP2P = "", true; return m }(), proc(al2, "-"), gpudirect.Blocked, gpudirect.Blocked, gpudirect.Blocked, "found no NVIDIA peer-memory provider"},
		{"gdr 0, kernel unknown", func() gdrcases.Machine { m := p5; m.P2P, m.GDR, m.EFAModule = "", "0", "2.1.1g"; return m }(), nil, gpudirect.Unknown, gpudirect.Blocked, gpudirect.Unknown, "gdr: 0"},
		{"gdr 1", func() gdrcases.Machine { m := p5; m.P2P, m.GDR, m.EFAModule = "", "1", "2.1.1g"; return m }(), proc(al2, "-"), gpudirect.Ready, gpudirect.Ready, gpudirect.Blocked, "needs 5.12"},
		{"GPU without a driver", func() gdrcases.Machine { m := p5; m.GPUDriver = "-"; return m }(), proc(al2023, "-"), gpudirect.Blocked, gpudirect.Blocked, gpudirect.Blocked, "bound to no driver"},
		{"GPU on vfio-pci", func() gdrcases.Machine { m := p5; m.GPUDriver = "vfio-pci"; return m }(), proc(al2023, "-"), gpudirect.Blocked, gpudirect.Blocked, gpudirect.Blocked, "bound to vfio-pci, not nvidia"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := assess(t, tc.m, tc.proc)
			assert.Equal(t, tc.want, p.Status, "%v", p.Reasons())
			assert.Equal(t, tc.peer, status(p, gpudirect.PeerMemory))
			assert.Equal(t, tc.dmabuf, status(p, gpudirect.DMABuf))
			assert.Equal(t, topology.LinkPXB, p.Link)
			if tc.reasonPart != "" {
				assert.Contains(t, strings.Join(p.Reasons(), "\n"), tc.reasonPart)
			}
			if tc.want == gpudirect.Ready {
				assert.Empty(t, nonReady(p))
			}
		})
	}
}

// nonReady lists the paths that are not ready.
func nonReady(p gpudirect.Pair) []gpudirect.Method {
	var out []gpudirect.Method
	for _, x := range p.Paths {
		if x.Status != gpudirect.Ready {
			out = append(out, x.Method)
		}
	}
	if len(out) == len(p.Paths) {
		return out
	}
	return nil
}

// TestACS: request redirect on the switch's downstream ports makes a
// ready pair slow; config space an unprivileged reader cannot see leaves
// ACS unknown without changing the status.
func TestACS(t *testing.T) {
	t.Parallel()
	p5 := gdrcases.Machine{Product: "p5.48xlarge", Shared: true, P2P: "NVIDIA", EFAModule: "2.13.0g", NVIDIA: "580.105.08"}

	redirect := p5
	redirect.ACS = &pcie.ACS{Capability: 0x5f, Control: 0x1d} // SrcValid ReqRedir CmpltRedir UpstreamFwd
	p := assess(t, redirect, proc(al2023, "-"))
	assert.Equal(t, gpudirect.Slow, p.Status)
	require.NotNil(t, p.ACS)
	assert.Equal(t, gpudirect.Slow, p.ACS.Status)
	assert.Contains(t, p.ACS.Message, "0000:46:01.0 (SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-)")
	assert.Contains(t, p.ACS.Message, "0000:46:01.4")
	assert.NotContains(t, p.ACS.Message, "0000:45:00.0", "the shared bridge is not where the traffic enters")

	off := p5
	off.ACS = &pcie.ACS{Capability: 0x5f}
	p = assess(t, off, proc(al2023, "-"))
	assert.Equal(t, gpudirect.Ready, p.Status)
	assert.Equal(t, gpudirect.Ready, p.ACS.Status)
	assert.Contains(t, p.ACS.Message, "2 checked")

	hidden := redirect
	hidden.HideACS = true
	p = assess(t, hidden, proc(al2023, "-"))
	assert.Equal(t, gpudirect.Ready, p.Status)
	assert.Equal(t, gpudirect.Unknown, p.ACS.Status)
	assert.Contains(t, p.ACS.Message, "needs root")

	apart := gdrcases.Machine{Product: "p5.48xlarge", P2P: "NVIDIA", EFAModule: "2.13.0g", NVIDIA: "580.105.08", ACS: redirect.ACS}
	p = assess(t, apart, proc(al2023, "-"))
	assert.Nil(t, p.ACS, "pairs on two root complexes cross the host: no switch port to judge")
	// Beyond PXB on an instance aws-ofi-nccl ships no topology file for:
	// NCCL stages the GPU's memory through the host.
	assert.Equal(t, gpudirect.Slow, p.Status)
	require.NotNil(t, p.NCCL)
	assert.Equal(t, gpudirect.Slow, p.NCCL.Status)
	assert.Contains(t, p.NCCL.Message, "beyond NCCL's default GPUDirect RDMA level (PXB)")
}

// scanCapture opens a bundled capture and scans it whole.
func scanCapture(t *testing.T, name string) (*sysfs.Root, *topology.Topology) {
	t.Helper()
	root, err := sysfs.Open(filepath.Join("..", "testdata", "sysfs", name+".sysfs"))
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	return root, topo
}

// TestNCCLLevel: what NCCL does with a pair by default, on the bundled
// captures: p5's PXB pairs within its GPUDirect RDMA level; p4d's and
// p4de's and g5.48xlarge's PHB pairs ready by aws-ofi-nccl's topology
// file, which the finding names; a PHB pair elsewhere slow, with the level that allows it.
func TestNCCLLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		capture, link string
		status        gpudirect.Status
		message       string
	}{
		{"p5.48xlarge", "PXB", gpudirect.Ready, "within NCCL's default GPUDirect RDMA level (PXB)"},
		{"p4d.24xlarge", "PHB", gpudirect.Ready, "aws-ofi-nccl's topology file for p4d.24xlarge (p4d-24xl-topo.xml)"},
		{"p4de.24xlarge", "PHB", gpudirect.Ready, "aws-ofi-nccl's topology file for p4de.24xlarge (p4de-24xl-topo.xml)"},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			t.Parallel()
			_, topo := scanCapture(t, tc.capture)
			pairs := gpudirect.Assess(topo, gpudirect.Node{})
			require.NotEmpty(t, pairs)
			for _, p := range pairs {
				require.NotNil(t, p.NCCL, "%s-%s", p.GPU.Name, p.EFA.Name)
				assert.Equal(t, tc.link, p.Link.String())
				assert.Equal(t, tc.status, p.NCCL.Status)
				assert.Contains(t, p.NCCL.Message, tc.message)
				assert.Equal(t, gpudirect.CheckNCCL, p.NCCL.Check)
			}
		})
	}
	// g5.48xlarge, which has no bundled capture: its model (the layout
	// aws-ofi-nccl's g5.48xl-topo.xml gives), eight GPUs with one EFA.
	g5, err := machines.Build("g5.48xlarge")
	require.NoError(t, err)
	g5root, err := g5.Root()
	require.NoError(t, err)
	g5topo, err := topology.Scan(g5root)
	require.NoError(t, err)
	g5pairs := gpudirect.Assess(g5topo, gpudirect.Node{})
	require.Len(t, g5pairs, 8)
	for _, p := range g5pairs {
		assert.Equal(t, "PHB", p.Link.String())
		require.NotNil(t, p.NCCL)
		assert.Equal(t, gpudirect.Ready, p.NCCL.Status)
		assert.Contains(t, p.NCCL.Message, "aws-ofi-nccl's topology file for g5.48xlarge (g5.48xl-topo.xml)")
	}

	// The same PHB pairs on an instance type without a file: slow.
	_, topo := scanCapture(t, "p4d.24xlarge")
	topo.Host.InstanceType = "p4x.24xlarge"
	p := gpudirect.Assess(topo, gpudirect.Node{})[0]
	assert.Equal(t, gpudirect.Slow, p.NCCL.Status)
	assert.Contains(t, p.NCCL.Message, "unless NCCL_NET_GDR_LEVEL is PHB or farther")
}

// TestFixtures: every bundled fixture is assessed without errors, each
// GPU with its closest EFAs, and the judgement is the one its facts allow:
// without a proc root or the nvidia module's version, dma-buf is unknown.
func TestFixtures(t *testing.T) {
	t.Parallel()
	for name, file := range captures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(file)
			require.NoError(t, err)
			defer root.Close()
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			r := sysread.New(root)
			pairs, _, err := gpudirect.Judge(r, topo, nil)
			require.NoError(t, err)
			gpus := topo.Of(topology.KindGPU)
			if len(gpus) == 0 || len(topo.Of(topology.KindEFA)) == 0 {
				assert.Empty(t, pairs)
				return
			}
			seen := map[*topology.Device]bool{}
			for _, p := range pairs {
				seen[p.GPU] = true
				assert.NotEqual(t, gpudirect.Blocked, status(p, gpudirect.DMABuf), "%s-%s: %v", p.GPU.Name, p.EFA.Name, p.Reasons())
				assert.True(t, p.ACS == nil || p.ACS.Status == gpudirect.Unknown, "fixtures hold no config space")
			}
			assert.Len(t, seen, len(gpus))
		})
	}
}

func TestParseParams(t *testing.T) {
	t.Parallel()
	p, err := gpudirect.ParseParams(paramsOverride)
	require.NoError(t, err)
	assert.Equal(t, "1", p[gpudirect.TopoCheckOverride])
	assert.Equal(t, `""`, p["RegistryDwords"])

	p, err = gpudirect.ParseParams("GrdmaPciTopoCheckOverride: 1\n# GrdmaPciTopoCheckOverride: 0\nno colon\n")
	assert.ErrorContains(t, err, "line 2")
	assert.Equal(t, "1", p[gpudirect.TopoCheckOverride], "a line that does not parse is skipped, not taken")

	p, err = gpudirect.ParseParams("MyGrdmaPciTopoCheckOverride: 1\n")
	require.NoError(t, err)
	assert.NotContains(t, p, gpudirect.TopoCheckOverride)
}

func TestVersions(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{"580.105.08": 580, "595.91.07": 595, "": 0, "x.1": 0, "-1.2": 0} {
		got, ok := gpudirect.DriverBranch(v)
		assert.Equal(t, want, got, v)
		assert.Equal(t, want != 0, ok, v)
	}
	for rel, want := range map[string][2]int{al2023: {6, 1}, al2: {5, 10}, "5.12.0": {5, 12}, "6.12rc1": {6, 12}} {
		ma, mi, ok := gpudirect.KernelVersion(rel)
		assert.True(t, ok, rel)
		assert.Equal(t, want, [2]int{ma, mi}, rel)
	}
	for _, rel := range []string{"", "6", "a.b", "6.x"} {
		_, _, ok := gpudirect.KernelVersion(rel)
		assert.False(t, ok, rel)
	}
}

func FuzzParseParams(f *testing.F) {
	f.Add(paramsOverride)
	f.Add("no colon\n:\n a b: c\n")
	f.Fuzz(func(t *testing.T, s string) {
		p, _ := gpudirect.ParseParams(s)
		for k := range p {
			if k == "" || strings.ContainsAny(k, " \t\n") {
				t.Fatalf("bad name %q", k)
			}
		}
	})
}

// TestCases: each fixture of testdata/gpudirect, read from its files as a
// user's efakit topo reads them, gets the status its case says.
func TestCases(t *testing.T) {
	t.Parallel()
	for _, c := range gdrcases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(filepath.Join("..", "testdata", "gpudirect", c.Name+".sysfs"))
			require.NoError(t, err)
			defer root.Close()
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			r := sysread.New(root)
			pairs, _, err := gpudirect.Judge(r, topo, os.DirFS(filepath.Join("..", "testdata", "gpudirect", c.Name+".proc")))
			require.NoError(t, err)
			require.Len(t, pairs, 1)
			assert.Equal(t, c.Want, pairs[0].Status.String(), "%v", pairs[0].Reasons())
		})
	}
}

// TestJudgingWritesNothing: Assess, Judge and JudgePair judge from what
// the scan read (IOMMU groups and gdr files among it). Two goroutines
// judging one topology do not race (the race detector is on in make
// test), and the topology's devices are as the scan left them.
func TestJudgingWritesNothing(t *testing.T) {
	t.Parallel()
	root, topo := scanCapture(t, "p5.48xlarge")
	proc := os.DirFS(filepath.Join("..", "testdata", "gpudirect", "p5-ready.proc"))
	type seen struct {
		iommu int
		gdr   *bool
	}
	state := func() map[string]seen {
		out := map[string]seen{}
		for _, d := range topo.Devices {
			if d.PCI == nil {
				continue
			}
			s := seen{iommu: d.PCI.IOMMUGroup}
			if d.EFA != nil {
				s.gdr = d.EFA.GDR
			}
			out[d.Name] = s
		}
		return out
	}
	before := state()
	done := make(chan [2]int)
	for range 2 {
		go func() {
			all, _, err := gpudirect.Judge(root, topo, proc)
			assert.NoError(t, err)
			done <- [2]int{len(all), len(gpudirect.Assess(topo, gpudirect.Node{}))}
		}()
	}
	for range 2 {
		n := <-done
		assert.Equal(t, [2]int{32, 32}, n, "each GPU with its four EFAs")
	}
	assert.Equal(t, before, state(), "the topology as the scan left it")
	pairs, _, err := gpudirect.Judge(root, topo, proc)
	require.NoError(t, err)
	assert.NotEmpty(t, pairs[0].ReadyBy(), "the copies held the facts: %v", pairs[0].Reasons())
}

// TestJudgePair judges any GPU with any EFA, the closest or not, as
// Judge does for the closest; what is not a GPU and an EFA of the
// topology is an error, never a panic.
func TestJudgePair(t *testing.T) {
	t.Parallel()
	root, topo := scanCapture(t, "p5.48xlarge")
	proc := os.DirFS(filepath.Join("..", "testdata", "gpudirect", "p5-ready.proc"))
	all, _, err := gpudirect.Judge(root, topo, proc)
	require.NoError(t, err)
	gpu0 := topo.ByName("GPU0")
	closest := topo.Closest(gpu0)[0]
	one, err := gpudirect.JudgePair(root, topo, gpu0, closest, proc)
	require.NoError(t, err)
	assert.Equal(t, all[0], one, "the closest pair, as Judge judges it")

	far := topo.Closest(topo.ByName("GPU7"))[0]
	p, err := gpudirect.JudgePair(root, topo, gpu0, far, proc)
	require.NoError(t, err)
	assert.Equal(t, topology.LinkSys, p.Link, "GPU0 and an EFA of the other socket")
	assert.Equal(t, "GPU0", p.GPU.Name)
	assert.Equal(t, far.Name, p.EFA.Name)

	other, err := topology.Scan(root)
	require.NoError(t, err)
	for name, pair := range map[string][2]*topology.Device{
		"nil GPU":               {nil, closest},
		"nil EFA":               {gpu0, nil},
		"an EFA as the GPU":     {closest, far},
		"a GPU as the EFA":      {gpu0, topo.ByName("GPU1")},
		"another scan's device": {other.ByName("GPU0"), closest},
	} {
		_, err := gpudirect.JudgePair(root, topo, pair[0], pair[1], proc)
		assert.Error(t, err, name)
	}
	_, err = gpudirect.JudgePair(root, nil, gpu0, closest, proc)
	assert.Error(t, err)
}
