package doctor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/plugin/doctor"
)

// linkScene is one GPU and two EFAs with their links at the maximum and
// each in an IOMMU group; edit changes the tree before the doctor runs.
func linkScene(t *testing.T, edit func(b *fakesys.Builder)) doctor.Check {
	t.Helper()
	b := fakesys.New()
	link := func(addr, cur, curW, max, maxW string) {
		dir := b.PCIDir(addr)
		b.Attr(dir+"/current_link_speed", cur)
		b.Attr(dir+"/current_link_width", curW)
		b.Attr(dir+"/max_link_speed", max)
		b.Attr(dir+"/max_link_width", maxW)
	}
	b.AddPCI(fakesys.PCI{Addr: "0000:10:1c.0", Vendor: 0x10de, Device: 0x20b0, Class: 0x030200, Driver: "nvidia", NUMA: 0, CPUs: "0-7"})
	for i, a := range []string{"0000:10:1b.0", "0000:10:1d.0"} {
		b.AddPCI(fakesys.PCI{Addr: a, Vendor: 0x1d0f, Device: 0xefa0, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-7"})
		b.AddEFA(fakesys.EFA{Addr: a, IBName: []string{"rdmap16s27", "rdmap16s29"}[i], Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0001"})
		link(a, "8.0 GT/s PCIe", "16", "8.0 GT/s PCIe", "16")
	}
	link("0000:10:1c.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16")
	if edit != nil {
		edit(b)
	}
	s := newScene(t, doctor.OnNode)
	s.opts.Sysfs = b.FS()
	return check(t, s.run(), doctor.CheckPCIeLinks)
}

func TestPCIeLinks(t *testing.T) {
	t.Parallel()
	t.Run("at the maximum", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, nil)
		assert.Equal(t, doctor.Pass, c.Status)
		assert.Equal(t, "3 links of 2 EFAs and 1 GPU at the maximum speed and width", c.Message)
		assert.Empty(t, c.Fix)
	})
	t.Run("an EFA slower and narrower", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Attr(b.PCIDir("0000:10:1d.0")+"/current_link_speed", "2.5 GT/s PCIe")
			b.Attr(b.PCIDir("0000:10:1d.0")+"/current_link_width", "4")
		})
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Equal(t, "1 link below the maximum: rdmap16s29 x4 2.5GT/s of x16 8GT/s; 2 at the maximum", c.Message)
		assert.Contains(t, c.Fix, "stop and start the instance")
	})
	t.Run("a GPU narrower", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Attr(b.PCIDir("0000:10:1c.0")+"/current_link_width", "8")
		})
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Equal(t, "1 link below the maximum: GPU 0000:10:1c.0 x8 16GT/s of x16 16GT/s; 2 at the maximum", c.Message)
	})
	t.Run("a link down", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Attr(b.PCIDir("0000:10:1b.0")+"/current_link_speed", "Unknown")
			b.Attr(b.PCIDir("0000:10:1b.0")+"/current_link_width", "0")
		})
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Contains(t, c.Message, "rdmap16s27 x0 ?GT/s of x16 8GT/s")
	})
	t.Run("an unknown maximum is no warning", func(t *testing.T) {
		t.Parallel()
		// A maximum the kernel cannot name: nothing to compare the speed with.
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Attr(b.PCIDir("0000:10:1b.0")+"/max_link_speed", "Unknown")
		})
		assert.Equal(t, doctor.Pass, c.Status)
	})
	t.Run("no IOMMU group is the gpudirect check's", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Remove(b.PCIDir("0000:10:1c.0") + "/iommu_group")
			b.Remove(b.PCIDir("0000:10:1b.0") + "/iommu_group")
		})
		assert.Equal(t, doctor.Pass, c.Status)
		assert.Equal(t, "3 links of 2 EFAs and 1 GPU at the maximum speed and width", c.Message)
	})
	t.Run("no IOMMU group without GPUs says nothing", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			b.Remove(b.PCIDir("0000:10:1c.0"))
			b.Remove("bus/pci/devices/0000:10:1c.0")
			b.Remove("bus/pci/drivers/nvidia/0000:10:1c.0")
			b.Remove(b.PCIDir("0000:10:1b.0") + "/iommu_group")
		})
		assert.Equal(t, doctor.Pass, c.Status)
		assert.Equal(t, "2 links of 2 EFAs at the maximum speed and width", c.Message)
	})
	t.Run("no link files", func(t *testing.T) {
		t.Parallel()
		c := linkScene(t, func(b *fakesys.Builder) {
			for _, a := range []string{"0000:10:1b.0", "0000:10:1c.0", "0000:10:1d.0"} {
				for _, f := range []string{"current_link_speed", "current_link_width", "max_link_speed", "max_link_width"} {
					b.Remove(b.PCIDir(a) + "/" + f)
				}
			}
		})
		assert.Equal(t, doctor.Skip, c.Status)
		assert.Equal(t, "no PCIe link files on the 2 EFAs and 1 GPU (not PCI Express, or a capture without them)", c.Message)
	})
}

// gdrScene runs the doctor on one of the GPUDirect cases, with a proc
// root holding the kernel release and, unless params is "", the nvidia
// module's parameters.
func gdrScene(t *testing.T, m gdrcases.Machine, kernel, params string) doctor.Check {
	t.Helper()
	s := newScene(t, doctor.OnNode)
	s.opts.Sysfs = m.Build().FS()
	write := func(name, data string) {
		p := filepath.Join(s.opts.ProcDir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	write("sys/kernel/osrelease", kernel+"\n")
	if params != "" {
		write("driver/nvidia/params", params)
	}
	return check(t, s.run(), doctor.CheckGPUDirect)
}

func TestGPUDirect(t *testing.T) {
	t.Parallel()
	p6e := gdrcases.Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g"}
	t.Run("P6e on R595 is blocked", func(t *testing.T) {
		t.Parallel()
		m := p6e
		m.NVIDIA = "595.91.07"
		c := gdrScene(t, m, "6.1.119-129.201.amzn2023.aarch64", "")
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Contains(t, c.Message, "1 GPU-EFA pair: 0 ready, 1 blocked")
		assert.Contains(t, c.Message, "GPU0-rdmap151s0 dma-buf nvidia-topology-check: GPU 0000:9d:00.0 (IOMMU group 0, pci0000:98) and EFA 0000:97:00.0 (no IOMMU group, pci0000:84)")
		assert.Contains(t, c.Message, "R595 has no override")
		assert.Contains(t, c.Fix, "efakit topo")
	})
	t.Run("P6e on R580 with the override passes", func(t *testing.T) {
		t.Parallel()
		m := p6e
		m.NVIDIA = "580.173.02"
		c := gdrScene(t, m, "6.1.119-129.201.amzn2023.aarch64", "ModifyDeviceFiles: 1\nGrdmaPciTopoCheckOverride: 1\n")
		assert.Equal(t, doctor.Pass, c.Status, c.Message)
		assert.Equal(t, "1 GPU-EFA pair: 1 ready (ready by dma-buf)", c.Message)
	})
	t.Run("ACS redirect warns", func(t *testing.T) {
		t.Parallel()
		m := gdrcases.Machine{Product: "p5.48xlarge", Shared: true, P2P: "NVIDIA", EFAModule: "2.13.0g", NVIDIA: "580.105.08",
			ACS: &pcie.ACS{Capability: 0x5f, Control: 0x0c}} // ReqRedir CmpltRedir
		c := gdrScene(t, m, "6.1.119-129.201.amzn2023.x86_64", "")
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Contains(t, c.Message, "1 slow")
		assert.Contains(t, c.Message, "ACS redirects peer-to-peer traffic to the root complex at 0000:46:01.4 (SrcValid- TransBlk- ReqRedir+ CmpltRedir+")
		assert.Contains(t, c.Message, "0000:46:01.0 (")
	})
	t.Run("p5 capture", func(t *testing.T) {
		t.Parallel()
		c := check(t, newScene(t, doctor.OnNode).run(), doctor.CheckGPUDirect)
		assert.Equal(t, doctor.Pass, c.Status, c.Message)
		assert.Equal(t, "32 GPU-EFA pairs: 32 ready (ready by peer-memory)", c.Message)
	})
}
