package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/sysfs"
)

// detailsCapture is one GPU and two EFAs on a root bus: the first EFA's
// link trained at x8 8 GT/s of x16 16 GT/s, with the legacy gdr file "1";
// the second at its maximum, without an IOMMU group. edit changes it
// before it is written.
func detailsCapture(t *testing.T, edit func(b *fakesys.Builder)) string {
	t.Helper()
	b := fakesys.New()
	b.Product("p4d.24xlarge")
	link := func(dir, cur, curW, max, maxW string) {
		b.Attr(dir+"/current_link_speed", cur)
		b.Attr(dir+"/current_link_width", curW)
		b.Attr(dir+"/max_link_speed", max)
		b.Attr(dir+"/max_link_width", maxW)
	}
	g := b.AddPCI(fakesys.PCI{Addr: "0000:10:1c.0", Vendor: 0x10de, Device: 0x20b0, Class: 0x030200, Driver: "nvidia", NUMA: -1, CPUs: "0-3"})
	link(g, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16")
	e0 := b.AddPCI(fakesys.PCI{Addr: "0000:10:1b.0", Vendor: 0x1d0f, Device: 0xefa0, Class: 0x020000, Driver: "efa", NUMA: -1, CPUs: "0-3"})
	link(e0, "8.0 GT/s PCIe", "8", "16.0 GT/s PCIe", "16")
	b.Attr(e0+"/gdr", "1")
	e1 := b.AddPCI(fakesys.PCI{Addr: "0000:10:1d.0", Vendor: 0x1d0f, Device: 0xefa0, Class: 0x020000, Driver: "efa", NUMA: -1, CPUs: "0-3"})
	link(e1, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16")
	b.Remove(e1 + "/iommu_group")
	b.AddEFA(fakesys.EFA{Addr: "0000:10:1b.0", IBName: "rdmap16s27", Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0001"})
	b.AddEFA(fakesys.EFA{Addr: "0000:10:1d.0", IBName: "rdmap16s29", Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0002"})
	if edit != nil {
		edit(b)
	}
	var capture bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&capture, nil, b.Entries()))
	path := filepath.Join(t.TempDir(), "details.sysfs")
	require.NoError(t, os.WriteFile(path, capture.Bytes(), 0o644))
	return path
}

func TestListDetailsTable(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("list", "--sysfs", detailsCapture(t, nil))
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 5, out)
	assert.Contains(t, lines[0], " LINK ")
	assert.Contains(t, lines[1], "rdmap16s27")
	assert.Contains(t, lines[1], "  x8 8GT/s (max x16 16GT/s)  ", "degraded: the maximum beside it")
	assert.Contains(t, lines[2], "rdmap16s29")
	assert.Contains(t, lines[2], "  x16 16GT/s  ")
	assert.NotContains(t, lines[2], "max")
	assert.Equal(t, "efa driver: in-tree or unknown (no module/efa/version)", lines[4])

	code, out, errOut = runCLI("list", "--sysfs", detailsCapture(t, func(b *fakesys.Builder) { b.Attr("module/efa/version", "2.5.0g") }))
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasSuffix(out, "\nefa driver: 2.5.0g\n"), out)
}

func TestListDetailsJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("list", "--sysfs", detailsCapture(t, func(b *fakesys.Builder) { b.Attr("module/efa/version", "2.5.0g") }), "-o", "json")
	require.Equal(t, 0, code, errOut)
	var views []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &views))
	require.Len(t, views, 2)
	assert.Equal(t, map[string]any{
		"current":  map[string]any{"speedGTs": 8.0, "width": 8.0},
		"max":      map[string]any{"speedGTs": 16.0, "width": 16.0},
		"degraded": true,
	}, views[0]["pcieLink"])
	assert.Equal(t, true, views[0]["gdr"])
	assert.Equal(t, 1.0, views[0]["iommuGroup"], "fakesys numbers groups in the order functions are added")
	assert.Equal(t, "2.5.0g", views[0]["driverVersion"])
	assert.Equal(t, false, views[1]["pcieLink"].(map[string]any)["degraded"])
	assert.Nil(t, views[1]["iommuGroup"], "no IOMMU group: null")
	assert.NotContains(t, views[1], "gdr", "no gdr file: absent")
}

func TestTopoDetailsJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("topo", "--sysfs", detailsCapture(t, func(b *fakesys.Builder) { b.Attr("module/efa/version", "2.5.0g") }), "-o", "json")
	require.Equal(t, 0, code, errOut)
	var v struct {
		Devices []map[string]any `json:"devices"`
		Version string           `json:"efaDriverVersion"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	assert.Equal(t, "2.5.0g", v.Version)
	require.Len(t, v.Devices, 3)
	assert.Equal(t, "GPU0", v.Devices[0]["label"])
	assert.Equal(t, 0.0, v.Devices[0]["iommuGroup"])
	assert.Equal(t, false, v.Devices[0]["pcieLink"].(map[string]any)["degraded"])
	assert.Equal(t, "rdmap16s27", v.Devices[1]["name"])
	assert.Equal(t, true, v.Devices[1]["pcieLink"].(map[string]any)["degraded"])
	assert.Equal(t, true, v.Devices[1]["gdr"])
	assert.NotContains(t, v.Devices[2], "iommuGroup")

	// The matrix shows none of it. It reads the efa module's version for
	// the GPUDirect judgement (the in-tree driver has none), so a damaged
	// one is an error, after the output.
	code, out, errOut = runCLI("topo", "--sysfs", detailsCapture(t, func(b *fakesys.Builder) { b.Attr("module/efa/version", "bad version") }))
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, `module/efa/version: "bad version" is not a module version`)
	assert.Contains(t, out, "GPUDirect RDMA")
	assert.NotContains(t, out, "16GT/s")
}

// TestDetailsDamaged: a damaged link file, gdr file or version is an error
// naming the device (or module) and the file; the rest is printed.
func TestDetailsDamaged(t *testing.T) {
	t.Parallel()
	path := detailsCapture(t, func(b *fakesys.Builder) {
		b.Attr(b.PCIDir("0000:10:1b.0")+"/current_link_width", "x8")
		b.Attr(b.PCIDir("0000:10:1b.0")+"/gdr", "yes")
		b.Attr("module/efa/version", "bad version")
	})
	for _, args := range [][]string{{"list"}, {"topo", "-o", "json"}} {
		code, out, errOut := runCLI(append(args, "--sysfs", path)...)
		assert.Equal(t, 1, code, args)
		assert.Contains(t, out, "rdmap16s29", args)
		assert.Contains(t, errOut, `: pci 0000:10:1b.0: devices/pci0000:10/0000:10:1b.0/current_link_width: "x8" is not a link width`, args)
		assert.Contains(t, errOut, `: efa rdmap16s27: devices/pci0000:10/0000:10:1b.0/gdr: "yes" is not a gdr value`, args)
		assert.Contains(t, errOut, `: efa efa module: module/efa/version: "bad version" is not a module version`, args)
	}
}
