package efa_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/pcie"
)

// smallSwitch is one p5-style switch: root pci0000:44, root port, switch
// upstream port, three downstream ports with two EFAs and one GPU, and an
// ENA on the root bus.
func smallSwitch() *fakesys.Builder {
	b := fakesys.New()
	b.NUMANodes(32, "0-3")
	br := func(addr, parent string) {
		b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, Driver: "pcieport", NUMA: 0, CPUs: "0-3"})
	}
	br("0000:44:00.0", "")
	br("0000:45:00.0", "0000:44:00.0")
	for i, ep := range []string{"0000:47:00.0", "0000:48:00.0", "0000:49:00.0"} {
		port := "0000:46:0" + string(rune('1'+i)) + ".0"
		br(port, "0000:45:00.0")
		p := fakesys.PCI{Addr: ep, Parent: port, Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-3"}
		if i == 2 {
			p = fakesys.PCI{Addr: ep, Parent: port, Vendor: 0x10de, Device: 0x2330, Class: 0x030200, Driver: "nvidia", NUMA: 0, CPUs: "0-3"}
		}
		b.AddPCI(p)
	}
	b.AddEFA(fakesys.EFA{Addr: "0000:47:00.0", IBName: "rdmap71s0", Rate: "100 Gb/sec (4X EDR)", NodeGUID: "cd77:f833:0000:1001", GID: "fe80:0000:0000:0000:0000:00ff:fe00:0001"})
	b.AddEFA(fakesys.EFA{Addr: "0000:48:00.0", IBName: "rdmap72s0", Rate: "100 Gb/sec (4X EDR)", NodeGUID: "cd77:f833:0000:1002", GID: "fe80:0000:0000:0000:0000:00ff:fe00:0002"})
	b.AddPCI(fakesys.PCI{Addr: "0000:44:01.0", Vendor: 0x1d0f, Device: 0xec20, Class: 0x020000, Driver: "ena", NUMA: 0, CPUs: "0-3"})
	b.AddNetdev("0000:44:01.0", "ens32", "02:00:00:00:00:01")
	return b
}

func names(ds []*efa.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

func TestDiscoverSmall(t *testing.T) {
	t.Parallel()
	tree, res, err := efa.Scan(smallSwitch().FS())
	require.NoError(t, err)
	require.Len(t, tree.Devices, 9)
	require.Equal(t, []string{"rdmap71s0", "rdmap72s0"}, names(res.EFAs))
	d := res.EFAs[1]
	assert.Equal(t, "0000:48:00.0", d.PCI.Address.String())
	assert.Equal(t, "pci0000:44", d.PCI.Root)
	assert.Equal(t, "efa1", d.Generation.String())
	assert.Equal(t, "cd77:f833:0000:1002", d.NodeGUID)
	require.NotNil(t, d.Verbs)
	assert.Equal(t, "uverbs1", d.Verbs.Name)
	assert.Equal(t, "/dev/infiniband/uverbs1", d.Verbs.DevicePath())
	assert.Equal(t, [2]uint32{231, 193}, [2]uint32{d.Verbs.Major, d.Verbs.Minor})
	require.Len(t, d.Ports, 1)
	assert.Equal(t, efa.Port{Number: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Unknown", Rate: "100 Gb/sec (4X EDR)", RateGbps: 100, GID: "fe80:0000:0000:0000:0000:00ff:fe00:0002"}, d.Ports[0])
	var chain []string
	for _, br := range d.PCI.Bridges() {
		chain = append(chain, br.Address.String())
	}
	assert.Equal(t, []string{"0000:44:00.0", "0000:45:00.0", "0000:46:02.0"}, chain)
	assert.Equal(t, 0, d.PCI.NUMANode)
	assert.Equal(t, "0-3", d.PCI.LocalCPUs.String())
	assert.Empty(t, d.Netdev, "the ENA sits on the root bus, not beside this EFA's port")

	c, err := d.ReadCounters(smallSwitch().FS())
	require.NoError(t, err)
	assert.Len(t, c.Device, 12, "the 12 device counters; lifespan is not one")
	assert.NotContains(t, c.Device, "lifespan")
	assert.NotContains(t, c.Ports[1], "lifespan")
	assert.Contains(t, c.Ports[1], "rdma_read_bytes")
}

// TestWithoutUevent: without uevent files the attribute files and driver
// links give the very same tree.
func TestWithoutUevent(t *testing.T) {
	t.Parallel()
	b := smallSwitch()
	tree, _, err := efa.Scan(b.FS())
	require.NoError(t, err)
	for _, d := range tree.Devices {
		b.Remove(d.Path + "/uevent")
	}
	tree2, res2, err := efa.Scan(b.FS())
	require.NoError(t, err)
	require.Len(t, tree2.Devices, len(tree.Devices))
	for i, d := range tree.Devices {
		o := tree2.Devices[i]
		assert.Equal(t, [5]any{d.Vendor, d.Device, d.SubsystemVendor, d.SubsystemDevice, d.Class}, [5]any{o.Vendor, o.Device, o.SubsystemVendor, o.SubsystemDevice, o.Class}, d.Address.String())
		assert.Equal(t, d.Driver, o.Driver, d.Address.String())
	}
	assert.Equal(t, []string{"rdmap71s0", "rdmap72s0"}, names(res2.EFAs))
}

func TestNetdevByGID(t *testing.T) {
	t.Parallel()
	b := smallSwitch()
	// An ENA whose MAC makes rdmap72s0's GID by EUI-64.
	b.Attr("devices/pci0000:44/0000:44:01.0/net/ens32/address", "02:00:00:00:00:02")
	_, res, err := efa.Scan(b.FS())
	require.NoError(t, err)
	assert.Equal(t, "", res.EFAs[0].Netdev)
	assert.Equal(t, "ens32", res.EFAs[1].Netdev)
}

func TestInactiveEFA(t *testing.T) {
	t.Parallel()
	b := smallSwitch()
	b.Remove("devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:47:00.0/infiniband")
	_, res, err := efa.Scan(b.FS())
	require.NoError(t, err)
	assert.Equal(t, []string{"rdmap72s0"}, names(res.EFAs))
	require.Len(t, res.Inactive, 1)
	assert.Equal(t, "0000:47:00.0", res.Inactive[0].Address.String())
}

func TestMlx5IsNotEFA(t *testing.T) {
	t.Parallel()
	b := smallSwitch()
	b.AddPCI(fakesys.PCI{Addr: "0000:73:00.0", Vendor: 0x15b3, Device: 0x1021, Class: 0x020700, Driver: "mlx5_core", NUMA: 0, CPUs: "0-3"})
	b.AddEFA(fakesys.EFA{Addr: "0000:73:00.0", IBName: "ibp115s0f0", Rate: "400 Gb/sec (4X NDR)", NodeGUID: "0000:0000:0000:0001"})
	_, res, err := efa.Scan(b.FS())
	require.NoError(t, err)
	assert.Equal(t, []string{"rdmap71s0", "rdmap72s0"}, names(res.EFAs))
}

// damaged is rdmap72s0's PCI function, which each damage case breaks.
const damaged = "devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:02.0/0000:48:00.0"

func TestDamage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(b *fakesys.Builder)
		file   string   // the error must name this file
		device string   // and this device
		want   []string // the EFAs still found
		is     error
	}{
		{"missing file", func(b *fakesys.Builder) { b.Remove(damaged + "/uevent"); b.Remove(damaged + "/vendor") }, damaged + "/vendor", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"missing uverbs dev", func(b *fakesys.Builder) { b.Remove(damaged + "/infiniband_verbs/uverbs1/dev") }, damaged + "/infiniband_verbs/uverbs1/dev", "rdmap72s0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		{"empty file", func(b *fakesys.Builder) { b.File(damaged+"/numa_node", "") }, damaged + "/numa_node", "0000:48:00.0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		{"garbage number", func(b *fakesys.Builder) { b.Attr(damaged+"/uevent", "PCI_ID=1D0F:EFA1ZZ") }, damaged + "/uevent", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"garbage attribute without uevent", func(b *fakesys.Builder) { b.Remove(damaged + "/uevent"); b.Attr(damaged+"/device", "0xefa1zz") }, damaged + "/device", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"uevent of another function", func(b *fakesys.Builder) {
			b.File(damaged+"/uevent", "PCI_CLASS=20000\nPCI_ID=1D0F:EFA1\nPCI_SUBSYS_ID=1D0F:EFA1\nPCI_SLOT_NAME=0000:47:00.0\n")
		}, damaged + "/uevent", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"garbage rate", func(b *fakesys.Builder) { b.Attr(damaged+"/infiniband/rdmap72s0/ports/1/rate", "fast") }, damaged + "/infiniband/rdmap72s0/ports/1/rate", "rdmap72s0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		{"dangling link", func(b *fakesys.Builder) {
			b.RawLink("bus/pci/devices/0000:48:00.0", "../../../devices/pci0000:44/gone")
		}, "bus/pci/devices/0000:48:00.0", "0000:48:00.0", []string{"rdmap71s0"}, fs.ErrNotExist},
		{"dangling driver link", func(b *fakesys.Builder) {
			b.Remove(damaged + "/uevent")
			b.RawLink(damaged+"/driver", "../../../../../../bus/pci/drivers/nothing")
		}, damaged + "/driver", "0000:48:00.0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		{"link loop", func(b *fakesys.Builder) { b.RawLink("bus/pci/devices/0000:48:00.0", "0000:48:00.0") }, "bus/pci/devices/0000:48:00.0", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"link leaving the root", func(b *fakesys.Builder) {
			b.RawLink("bus/pci/devices/0000:48:00.0", "../../../../etc/0000:48:00.0")
		}, "bus/pci/devices/0000:48:00.0", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"absolute link", func(b *fakesys.Builder) { b.RawLink("bus/pci/devices/0000:48:00.0", "/sys/"+damaged) }, "bus/pci/devices/0000:48:00.0", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"unreadable file", func(b *fakesys.Builder) { b.FileMode(damaged+"/infiniband/rdmap72s0/node_guid", "", 0o200) }, damaged + "/infiniband/rdmap72s0/node_guid", "rdmap72s0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		{"very large file", func(b *fakesys.Builder) { b.File(damaged+"/uevent", "PCI_CLASS=20000"+strings.Repeat(" ", 1<<20)) }, damaged + "/uevent", "0000:48:00.0", []string{"rdmap71s0"}, nil},
		{"two RDMA devices", func(b *fakesys.Builder) { b.Dir(damaged + "/infiniband/rdmap72s1") }, damaged + "/infiniband", "0000:48:00.0", []string{"rdmap71s0", "rdmap72s0"}, nil},
		// Names that would break the error's line are quoted.
		{"link to a path with a newline", func(b *fakesys.Builder) {
			b.Dir("devices/pci0000:44/x\ny/0000:48:00.0")
			b.Link("bus/pci/devices/0000:48:00.0", "devices/pci0000:44/x\ny/0000:48:00.0")
		}, "bus/pci/devices/0000:48:00.0", "0000:48:00.0", []string{"rdmap71s0"}, pcie.ErrBadName},
		{"listed name with a newline", func(b *fakesys.Builder) { b.Link("bus/pci/devices/0000:48:00.0\n", damaged) },
			strconv.Quote("bus/pci/devices/0000:48:00.0\n"), strconv.Quote("0000:48:00.0\n"), []string{"rdmap71s0", "rdmap72s0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := smallSwitch()
			tc.damage(b)
			_, res, err := efa.Scan(b.FS())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.file)
			assert.Contains(t, err.Error(), tc.device)
			assert.Equal(t, tc.want, names(res.EFAs), "the other devices are still found")
			if tc.is != nil {
				assert.True(t, errors.Is(err, tc.is))
			}
			// One error line per damaged thing, not a cascade.
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
		})
	}
}

func TestNetdevFallback(t *testing.T) {
	t.Parallel()
	flat := func(efas int) *fakesys.Builder {
		b := fakesys.New()
		b.AddPCI(fakesys.PCI{Addr: "0000:10:01.0", Vendor: 0x1d0f, Device: 0xec20, Class: 0x020000, Driver: "ena", NUMA: -1, CPUs: "0-1"})
		b.AddNetdev("0000:10:01.0", "ens32", "02:00:00:00:00:99") // its EUI-64 is no EFA's GID
		for i := range efas {
			addr := fmt.Sprintf("0000:10:1%d.0", i)
			b.AddPCI(fakesys.PCI{Addr: addr, Vendor: 0x1d0f, Device: 0xefa0, Class: 0x020000, Driver: "efa", NUMA: -1, CPUs: "0-1"})
			b.AddEFA(fakesys.EFA{Addr: addr, IBName: fmt.Sprintf("rdmap16s1%d", i), Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0000"})
		}
		return b
	}
	_, res, err := efa.Scan(flat(1).FS())
	require.NoError(t, err)
	assert.Equal(t, "ens32", res.EFAs[0].Netdev, "one ENA and one EFA on a root bus are one interface")
	_, res, err = efa.Scan(flat(2).FS())
	require.NoError(t, err)
	assert.Equal(t, "", res.EFAs[0].Netdev, "ambiguous: no guess")
	assert.Equal(t, "", res.EFAs[1].Netdev)
}

// TestDamagedOptionalStaysUnknown: every optional attribute of the PCI
// function, the RDMA device, its port and the ENA beside it, damaged in turn
// (garbage, or text that cannot be printed). Each is reported once, naming
// the device and the file, and left at its documented unknown value, never
// the parser's zero or the raw text; everything else is as in the
// undamaged tree.
func TestDamagedOptionalStaysUnknown(t *testing.T) {
	t.Parallel()
	ib := damaged + "/infiniband/rdmap72s0/"
	port := ib + "ports/1/"
	ena := "devices/pci0000:44/0000:44:01.0"
	for _, tc := range []struct {
		name string
		// prep is done to both trees (the undamaged one too); damage to
		// the damaged one only. Without damage, file is set to value.
		prep, damage func(b *fakesys.Builder)
		file, value  string
		// who is the device the error names, with file: the PCI function
		// by default, the RDMA device for its own files.
		who   string
		pci   string                            // the function that may change (0000:48:00.0 by default)
		check func(t *testing.T, d *efa.Device) // rdmap72s0's damaged field
	}{
		// pcie
		// A damaged numa_node is never the parser's zero: the node is the
		// one whose CPUs local_cpulist names exactly (0-3, node 0's).
		{name: "numa_node", file: damaged + "/numa_node", value: "abc",
			check: func(t *testing.T, d *efa.Device) { assert.Equal(t, 0, d.PCI.NUMANode) }},
		{name: "numa_node negative", file: damaged + "/numa_node", value: "-7",
			check: func(t *testing.T, d *efa.Device) { assert.Equal(t, 0, d.PCI.NUMANode) }},
		{name: "numa_node and local_cpulist", damage: func(b *fakesys.Builder) {
			b.Attr(damaged+"/numa_node", "abc")
			b.Attr(damaged+"/local_cpulist", "0-1")
		}, file: damaged + "/numa_node",
			check: func(t *testing.T, d *efa.Device) { assert.Equal(t, pcie.NoNUMA, d.PCI.NUMANode) }},
		{name: "local_cpulist", file: damaged + "/local_cpulist", value: "0-x",
			check: func(t *testing.T, d *efa.Device) { assert.Nil(t, d.PCI.LocalCPUs) }},
		{name: "revision", file: damaged + "/revision", value: "0xzz",
			check: func(t *testing.T, d *efa.Device) { assert.Zero(t, d.PCI.Revision) }},
		{name: "subsystem_vendor", prep: noUevent, file: damaged + "/subsystem_vendor", value: "0x1d0fz",
			check: func(t *testing.T, d *efa.Device) { assert.Zero(t, d.PCI.SubsystemVendor) }},
		{name: "subsystem_device", prep: noUevent, file: damaged + "/subsystem_device", value: "0x1efa1",
			check: func(t *testing.T, d *efa.Device) { assert.Zero(t, d.PCI.SubsystemDevice) }},
		{name: "driver link to a name with a newline", prep: noUevent, damage: func(b *fakesys.Builder) {
			b.Dir("bus/pci/drivers/efa\nmlx5_core")
			b.Link(damaged+"/driver", "bus/pci/drivers/efa\nmlx5_core")
		}, file: damaged + "/driver",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.PCI.Driver) }},
		// efa: the RDMA device
		{name: "node_guid", file: ib + "node_guid", value: "cd77:f833:0000:zz02",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.NodeGUID) }},
		{name: "sys_image_guid", file: ib + "sys_image_guid", value: "zz",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.SysImageGUID) }},
		{name: "fw_ver", file: ib + "fw_ver", value: "1.0\x1b[2J",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.FirmwareVer) }},
		{name: "p2p", file: damaged + "/p2p", value: "NV\x7fIDIA",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.P2P) }},
		// efa: the port
		{name: "state", file: port + "state", value: "ACTIVE",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Ports[0].State) }},
		{name: "state with an escape", file: port + "state", value: "4: ACT\x1bIVE",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Ports[0].State) }},
		{name: "phys_state", file: port + "phys_state", value: "5",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Ports[0].PhysState) }},
		{name: "rate", file: port + "rate", value: "fast", check: noRate},
		{name: "rate with a tab", file: port + "rate", value: "100 Gb/sec (4X\tEDR)", check: noRate},
		{name: "link_layer", file: port + "link_layer", value: "Unk\nnown",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Ports[0].LinkLayer) }},
		{name: "gid", file: port + "gids/0", value: "fe80::1",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Ports[0].GID) }},
		// efa: the ENA beside it, paired by its MAC until that is damaged
		{name: "ENA address", prep: enaOf72, file: ena + "/net/ens32/address", value: "02:00:00:00:00:0g",
			who: "efa 0000:44:01.0", pci: "0000:44:01.0",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Netdev) }},
		{name: "ENA address unreadable", prep: enaOf72, damage: func(b *fakesys.Builder) {
			b.FileMode(ena+"/net/ens32/address", "02:00:00:00:00:02\n", 0o200)
		}, file: ena + "/net/ens32/address", who: "efa 0000:44:01.0", pci: "0000:44:01.0",
			check: func(t *testing.T, d *efa.Device) { assert.Empty(t, d.Netdev) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clean, b := smallSwitch(), smallSwitch()
			if tc.prep != nil {
				tc.prep(clean)
				tc.prep(b)
			}
			if tc.damage != nil {
				tc.damage(b)
			} else {
				b.Attr(tc.file, tc.value)
			}
			if tc.pci == "" {
				tc.pci = "0000:48:00.0"
			}
			if tc.who == "" {
				tc.who = "pci 0000:48:00.0"
				if strings.Contains(tc.file, "/infiniband/") || strings.HasSuffix(tc.file, "/p2p") {
					tc.who = "efa rdmap72s0"
				}
			}
			ctree, cres, err := efa.Scan(clean.FS())
			require.NoError(t, err)
			tree, res, err := efa.Scan(b.FS())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.who+": "+tc.file+": ")
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, "one error: %s", err)
			require.Equal(t, []string{"rdmap71s0", "rdmap72s0"}, names(res.EFAs), "still found")
			d := res.EFAs[1]
			require.Len(t, d.Ports, 1)
			tc.check(t, d)
			// The other functions and EFAs are as without the damage.
			want, got := makeGolden(ctree, cres), makeGolden(tree, res)
			require.Len(t, got.PCI, len(want.PCI))
			for i := range want.PCI {
				if want.PCI[i].Address != tc.pci {
					assert.Equal(t, want.PCI[i], got.PCI[i])
				}
			}
			for i := range want.EFAs {
				if want.EFAs[i].Name != "rdmap72s0" {
					assert.Equal(t, want.EFAs[i], got.EFAs[i])
				}
			}
		})
	}
}

// noUevent removes the damaged function's uevent, so that its IDs and
// driver come from the attribute files and the driver link.
func noUevent(b *fakesys.Builder) { b.Remove(damaged + "/uevent") }

// enaOf72 gives the ENA the MAC whose EUI-64 is rdmap72s0's GID.
func enaOf72(b *fakesys.Builder) {
	b.Attr("devices/pci0000:44/0000:44:01.0/net/ens32/address", "02:00:00:00:00:02")
}

func noRate(t *testing.T, d *efa.Device) {
	assert.Empty(t, d.Ports[0].Rate)
	assert.Zero(t, d.Ports[0].RateGbps)
}
