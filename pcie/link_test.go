package pcie_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
)

func TestParseLinkSpeed(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"2.5 GT/s PCIe":  2.5,
		"8.0 GT/s PCIe":  8,
		"16.0 GT/s PCIe": 16,
		"32.0 GT/s PCIe": 32,
		"64.0 GT/s PCIe": 64,
		"8 GT/s":         8, // before Linux 5.2
		"2.5 GT/s":       2.5,
		"Unknown":        0,
		"Unknown speed":  0,
	} {
		got, err := pcie.ParseLinkSpeed(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "16", "16.0 GT/s PCIe x", "16.0 Gb/s", "-8 GT/s", "1e3 GT/s", "0x10 GT/s", "0 GT/s", ". GT/s", "8. GT/s", "NaN GT/s", "Inf GT/s", "2000 GT/s", "unknown"} {
		_, err := pcie.ParseLinkSpeed(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestParseLinkWidth(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"16": 16, "8": 8, "1": 1, "0": 0, "255": pcie.UnknownWidth, "063": 63} {
		got, err := pcie.ParseLinkWidth(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x16", "-1", "+4", "64", "254", "256", "1000", "0x10", "16 "} {
		got, err := pcie.ParseLinkWidth(in)
		assert.Error(t, err, "%q", in)
		assert.Equal(t, pcie.UnknownWidth, got, "%q: unknown, never the parser's zero", in)
	}
}

func TestParseIOMMUGroup(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"../../../kernel/iommu_groups/12": 12, "../../../../../kernel/iommu_groups/0": 0, "/sys/kernel/iommu_groups/7": 7} {
		got, err := pcie.ParseIOMMUGroup(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "../../../kernel/iommu_groups/", "../../../kernel/iommu_groups/x", "../../../kernel/groups/3", "12", "../../../kernel/iommu_groups/-1", "../../../kernel/iommu_groups/1234567890"} {
		_, err := pcie.ParseIOMMUGroup(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestLinkBelowAndString(t *testing.T) {
	t.Parallel()
	max := pcie.LinkRate{Speed: 16, Width: 16}
	for _, tc := range []struct {
		cur   pcie.LinkRate
		below bool
		str   string
	}{
		{pcie.LinkRate{Speed: 16, Width: 16}, false, "x16 16GT/s"},
		{pcie.LinkRate{Speed: 8, Width: 16}, true, "x16 8GT/s"},
		{pcie.LinkRate{Speed: 16, Width: 8}, true, "x8 16GT/s"},
		{pcie.LinkRate{Speed: 2.5, Width: 0}, true, "x0 2.5GT/s"},                // down
		{pcie.LinkRate{Speed: 0, Width: pcie.UnknownWidth}, false, "x? ?GT/s"},   // nothing known
		{pcie.LinkRate{Speed: 0, Width: 16}, false, "x16 ?GT/s"},                 // speed unknown, width at max
		{pcie.LinkRate{Speed: 16, Width: pcie.UnknownWidth}, false, "x? 16GT/s"}, // width unknown, speed at max
		{pcie.LinkRate{Speed: 8, Width: pcie.UnknownWidth}, true, "x? 8GT/s"},    // slower, width unknown
		{pcie.LinkRate{Speed: 32, Width: 16}, false, "x16 32GT/s"},               // faster than max: not below
		{pcie.LinkRate{Speed: 16, Width: 16}, false, "x16 16GT/s"},               // same
		{pcie.LinkRate{Speed: 16, Width: 4}, true, "x4 16GT/s"},                  // narrower
		{pcie.LinkRate{Speed: 5, Width: 16}, true, "x16 5GT/s"},                  // slower
	} {
		assert.Equal(t, tc.below, tc.cur.Below(max), "%+v", tc.cur)
		assert.Equal(t, tc.str, tc.cur.String())
	}
	assert.False(t, pcie.LinkRate{Speed: 8, Width: 8}.Below(pcie.LinkRate{Speed: 0, Width: pcie.UnknownWidth}), "an unknown maximum says nothing")
}

// linkTree is two functions: an EFA with all four link files and an
// iommu_group link, and a function with neither (not PCI Express, no IOMMU).
func linkTree(t *testing.T, edit func(b *fakesys.Builder, efaDir string)) *sysread.Reader {
	t.Helper()
	b := fakesys.New()
	dir := b.AddPCI(fakesys.PCI{Addr: "0000:10:1b.0", Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-7"})
	b.Attr(dir+"/current_link_speed", "8.0 GT/s PCIe")
	b.Attr(dir+"/current_link_width", "8")
	b.Attr(dir+"/max_link_speed", "16.0 GT/s PCIe")
	b.Attr(dir+"/max_link_width", "16")
	legacy := b.AddPCI(fakesys.PCI{Addr: "0000:00:03.0", Vendor: 0x1d0f, Device: 0x1111, Class: 0x030000, NUMA: 0, CPUs: "0-7"})
	b.Remove(legacy + "/iommu_group")
	if edit != nil {
		edit(b, dir)
	}
	return sysread.New(b.FS())
}

func TestDiscoverLinkAndIOMMU(t *testing.T) {
	t.Parallel()
	tree, err := pcie.Discover(linkTree(t, nil))
	require.NoError(t, err)
	e := tree.Lookup(pcie.Address{Bus: 0x10, Device: 0x1b})
	require.NotNil(t, e)
	assert.Equal(t, &pcie.LinkRate{Speed: 8, Width: 8}, e.CurrentLink)
	assert.Equal(t, &pcie.LinkRate{Speed: 16, Width: 16}, e.MaxLink)
	assert.True(t, e.CurrentLink.Below(*e.MaxLink))
	// fakesys numbers IOMMU groups in the order functions are added.
	assert.Equal(t, 0, e.IOMMUGroup)
	legacy := tree.Lookup(pcie.Address{Bus: 0, Device: 3})
	require.NotNil(t, legacy)
	assert.Nil(t, legacy.CurrentLink, "no link files: not PCI Express")
	assert.Nil(t, legacy.MaxLink)
	assert.Equal(t, pcie.NoIOMMUGroup, legacy.IOMMUGroup, "no iommu_group link: no IOMMU")
}

// TestLeanPassLeavesLinkUnread: a lean pass (internal/sysread.NewLean,
// the plugin's) that does not ask for them leaves the link and IOMMU group
// at their unknown values; one that asks reads them.
func TestLeanPassLeavesLinkUnread(t *testing.T) {
	t.Parallel()
	r := linkTree(t, nil)
	lean := func(bits uint8) *pcie.Tree {
		tree, err := pcie.Discover(sysread.NewLean(r, sysread.Lean{PCI: func(uint16, uint16, uint32, string) uint8 { return bits }}))
		require.NoError(t, err)
		return tree
	}
	e := lean(sysread.PCINUMANode).Lookup(pcie.Address{Bus: 0x10, Device: 0x1b})
	require.NotNil(t, e)
	assert.Nil(t, e.CurrentLink)
	assert.Nil(t, e.MaxLink)
	assert.Equal(t, pcie.NoIOMMUGroup, e.IOMMUGroup)
	assert.Equal(t, 0, e.NUMANode, "read")
	e = lean(sysread.PCILink | sysread.PCIIOMMU).Lookup(pcie.Address{Bus: 0x10, Device: 0x1b})
	assert.Equal(t, &pcie.LinkRate{Speed: 8, Width: 8}, e.CurrentLink)
	assert.Equal(t, &pcie.LinkRate{Speed: 16, Width: 16}, e.MaxLink)
	assert.Equal(t, 0, e.IOMMUGroup)
	assert.Equal(t, pcie.NoNUMA, e.NUMANode, "not asked for")
}

// TestDiscoverDamagedLink: a damaged link file or iommu_group link is an
// error naming the function and the file; the function is kept with that
// half unknown, and the other functions are read.
func TestDiscoverDamagedLink(t *testing.T) {
	t.Parallel()
	r := linkTree(t, func(b *fakesys.Builder, dir string) {
		b.Attr(dir+"/current_link_width", "sixteen")
		b.Attr(dir+"/max_link_speed", "fast")
		b.Remove(dir + "/iommu_group")
		b.RawLink(dir+"/iommu_group", "../../../kernel/groups/3")
	})
	tree, err := pcie.Discover(r)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `pci 0000:10:1b.0: devices/pci0000:10/0000:10:1b.0/current_link_width: "sixteen" is not a link width`)
	assert.Contains(t, msg, `pci 0000:10:1b.0: devices/pci0000:10/0000:10:1b.0/max_link_speed: "fast" is not a link speed`)
	assert.Contains(t, msg, `pci 0000:10:1b.0: devices/pci0000:10/0000:10:1b.0/iommu_group: "../../../kernel/groups/3" is not a link to kernel/iommu_groups/<N>`)
	require.Len(t, tree.Devices, 2, "both functions kept")
	e := tree.Lookup(pcie.Address{Bus: 0x10, Device: 0x1b})
	assert.Equal(t, &pcie.LinkRate{Speed: 8, Width: pcie.UnknownWidth}, e.CurrentLink)
	assert.Equal(t, &pcie.LinkRate{Speed: 0, Width: 16}, e.MaxLink)
	assert.Equal(t, pcie.NoIOMMUGroup, e.IOMMUGroup)
}

// TestDiscoverLinkDownAndUnknown: the kernel's own words for a link it
// cannot describe are not errors.
func TestDiscoverLinkDownAndUnknown(t *testing.T) {
	t.Parallel()
	r := linkTree(t, func(b *fakesys.Builder, dir string) {
		b.Attr(dir+"/current_link_speed", "Unknown")
		b.Attr(dir+"/current_link_width", "0")
		b.Attr(dir+"/max_link_speed", "Unknown speed")
		b.Attr(dir+"/max_link_width", "255")
	})
	tree, err := pcie.Discover(r)
	require.NoError(t, err)
	e := tree.Lookup(pcie.Address{Bus: 0x10, Device: 0x1b})
	assert.Equal(t, &pcie.LinkRate{Speed: 0, Width: 0}, e.CurrentLink)
	assert.Equal(t, &pcie.LinkRate{Speed: 0, Width: pcie.UnknownWidth}, e.MaxLink)
}

func FuzzParseLinkSpeed(f *testing.F) {
	for _, s := range []string{"16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s PCIe", "Unknown", "Unknown speed", "1e3 GT/s", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := pcie.ParseLinkSpeed(s)
		if err != nil && v != 0 || v < 0 || v > 1024 {
			t.Fatalf("%q -> %v, %v", s, v, err)
		}
		if err == nil && v > 0 {
			// The number printed plainly parses back to the same speed.
			back, err := pcie.ParseLinkSpeed(strconv.FormatFloat(v, 'f', -1, 64) + " GT/s PCIe")
			if err != nil || back != v {
				t.Fatalf("%q -> %v -> %v, %v", s, v, back, err)
			}
		}
	})
}

func FuzzParseLinkWidth(f *testing.F) {
	for _, s := range []string{"16", "0", "255", "64", "-1", "x16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := pcie.ParseLinkWidth(s)
		if err != nil && n != pcie.UnknownWidth || n < pcie.UnknownWidth || n > 63 {
			t.Fatalf("%q -> %d, %v", s, n, err)
		}
	})
}

func FuzzParseIOMMUGroup(f *testing.F) {
	for _, s := range []string{"../../../kernel/iommu_groups/12", "../../../kernel/iommu_groups/", "iommu_groups/0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := pcie.ParseIOMMUGroup(s)
		if err == nil && n < 0 {
			t.Fatalf("%q -> %d", s, n)
		}
	})
}
