// Package scale builds sysfs trees of a size no instance has, for
// benchmarks that must show how efakit grows with the device count: the
// p5.48xlarge fixture k times over. Copy c sits in PCI domain c with NUMA
// nodes 2c and 2c+1 and CPUs of its own, so every address, RDMA, uverbs and
// netdev name stays distinct and every reader accepts the tree as it
// accepts the fixture. One copy is the fixture itself, entry for entry
// (TestOneCopyIsTheFixture).
//
// The layout repeats internal/fixturegen/machines' p5 by hand, since those
// models build one machine in domain 0000; the test keeps the two the same.
package scale

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/sysfs"
)

// What one copy of p5.48xlarge holds.
const (
	P5GPUs = 8
	P5EFAs = 32
)

// P5 PCI IDs and classes, as the p5 fixture has them.
const (
	amazon = 0x1d0f
	nvidia = 0x10de
	intel  = 0x8086

	classHostBridge = 0x060000
	classPCIBridge  = 0x060400
	classVGA        = 0x030000
	class3D         = 0x030200
	classEthernet   = 0x020000
	classNVMe       = 0x010802
	classBridgeMisc = 0x068000

	seed     = 2 // the p5 fixture's: its MACs and GUIDs
	far      = 32
	cpusCopy = 192
	maxCPUs  = 8192
	rate100  = "100 Gb/sec (4X EDR)"
)

// P5 returns the p5.48xlarge tree k times over, 1 <= k <= 2048 (four
// CPUs a copy at least).
func P5(k int) *fakesys.Builder {
	if k < 1 || k > maxCPUs/4 {
		panic(fmt.Sprintf("scale: %d copies", k))
	}
	g := &gen{b: fakesys.New(), mac: map[string]string{}, eni: map[string]string{}}
	b := g.b
	b.Product("p5.48xlarge")
	// Each copy has p5's 192 vCPUs while the kernel's limit allows
	// (NR_CPUS is at most 8192), fewer beyond, split between its two
	// nodes as p5's are: each node a quarter, then a quarter of the
	// hyperthreads.
	n := cpusCopy
	if k*n > maxCPUs {
		n = maxCPUs / k &^ 3
	}
	var nodes []string
	for c := range k {
		o, q := c*n, n/4
		nodes = append(nodes,
			fmt.Sprintf("%d-%d,%d-%d", o, o+q-1, o+2*q, o+3*q-1),
			fmt.Sprintf("%d-%d,%d-%d", o+q, o+2*q-1, o+3*q, o+4*q-1))
	}
	g.all = fmt.Sprintf("0-%d", k*n-1)
	g.nodes = nodes
	b.NUMANodes(far, nodes...)
	b.Attr("devices/virtual/net/lo/address", "00:00:00:00:00:00")
	b.Attr("devices/virtual/net/lo/operstate", "unknown")
	b.Attr("devices/virtual/net/lo/mtu", "65536")
	b.Attr("devices/virtual/net/lo/ifindex", "1")
	b.Link("class/net/lo", "devices/virtual/net/lo")

	// Root bus 0 of domain 0: the emulated host bridge, VGA and EBS root
	// volume, once per machine.
	g.fn(addr(0, 0, 0), "", 0, intel, 0x1237, classHostBridge, 0x02, "")
	g.fn(addr(0, 0, 3), "", 0, amazon, 0x1111, classVGA, 0, "")
	g.fn(addr(0, 0, 4), "", 0, amazon, 0x8061, classNVMe, 0, "nvme")
	for c := range k {
		g.copyP5(c)
	}
	g.finish()
	return b
}

// P5Capture is P5(k) as capture text.
func P5Capture(k int) ([]byte, error) {
	var buf bytes.Buffer
	header := []string{fmt.Sprintf("p5.48xlarge x%d: internal/fixturegen/scale, for benchmarks", k)}
	if err := sysfs.WriteCapture(&buf, header, P5(k).Entries()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type gen struct {
	b     *fakesys.Builder
	nodes []string
	all   string
	macs  int
	mac   map[string]string // ENA address -> MAC
	eni   map[string]string // EFA address -> ENA address
	rdma  []string          // EFA addresses
}

// copyP5 adds copy c: eight switches, each with four EFAs, a GPU and a
// local disk, the first with an ENA; four NVSwitches on their own root.
func (g *gen) copyP5(c int) {
	for s := range 8 {
		root := 0x44 + 0x11*s
		node := 2*c + s/4
		type dev struct {
			bus int
			add func(a, parent string)
		}
		var devs []dev
		for i := range 4 {
			devs = append(devs, dev{root + 0x0b + i, func(a, p string) {
				g.fn(a, p, node, amazon, 0xefa1, classEthernet, 0, "efa")
				g.rdma = append(g.rdma, a)
			}})
		}
		devs = append(devs,
			dev{root + 0x0f, func(a, p string) { g.fn(a, p, node, nvidia, 0x2330, class3D, 0xa1, "nvidia") }},
			dev{root + 0x10, func(a, p string) { g.fn(a, p, node, amazon, 0xcd01, classNVMe, 0, "nvme") }})
		if s == 0 {
			devs = append(devs, dev{root + 3, func(a, p string) { g.ena(a, p, node) }})
		}
		rp, up := addr(c, root, 0), addr(c, root+1, 0)
		g.bridge(rp, "", node, root+1, root+0x10)
		g.bridge(up, rp, node, root+2, root+0x10)
		// 14 downstream ports, port i (slot i/8, function i%8) leading to
		// bus root+3+i; the ports without a device are empty.
		for i := range 14 {
			bus := root + 3 + i
			dp := fmt.Sprintf("%04x:%02x:%02x.%d", c, root+2, i/8, i%8)
			g.bridge(dp, up, node, bus, bus)
			for _, d := range devs {
				if d.bus == bus {
					d.add(addr(c, bus, 0), dp)
				}
			}
		}
	}
	g.eni[addr(c, 0x4f, 0)] = addr(c, 0x47, 0)
	for slot := range 4 {
		g.fn(addr(c, 0xe0, slot), "", 2*c+1, nvidia, 0x22a3, classBridgeMisc, 0xa1, "nvidia")
	}
}

func (g *gen) fn(a, parent string, node int, vendor, device uint16, class uint32, rev uint8, driver string) string {
	cpus := g.all
	if node >= 0 {
		cpus = g.nodes[node]
	}
	dir := g.b.AddPCI(fakesys.PCI{Addr: a, Parent: parent, Vendor: vendor, Device: device, Class: class,
		Revision: rev, Driver: driver, NUMA: node, CPUs: cpus})
	// The link files the p5 fixture gives its EFAs and GPUs (fixturegen's
	// pcieLink): an efa1 at PCIe 3.0 x16, an H100 at PCIe 5.0 x16.
	speed := map[uint16]string{0xefa1: "8.0 GT/s PCIe", 0x2330: "32.0 GT/s PCIe"}[device]
	if speed != "" {
		for _, p := range []string{"current", "max"} {
			g.b.Attr(dir+"/"+p+"_link_speed", speed)
			g.b.Attr(dir+"/"+p+"_link_width", "16")
		}
	}
	return dir
}

func (g *gen) bridge(a, parent string, node, secondary, subordinate int) {
	dir := g.fn(a, parent, node, amazon, 0x0200, classPCIBridge, 0, "pcieport")
	g.b.Attr(dir+"/secondary_bus_number", strconv.Itoa(secondary))
	g.b.Attr(dir+"/subordinate_bus_number", strconv.Itoa(subordinate))
}

// ena adds an ENA with its netdev, named as systemd names it (enp71s0;
// enP1p71s0 outside domain 0).
func (g *gen) ena(a, parent string, node int) {
	g.fn(a, parent, node, amazon, 0xec20, classEthernet, 0, "ena")
	g.macs++
	mac := fmt.Sprintf("02:%02x:0e:4a:%02x:%02x", seed, g.macs>>8, g.macs&0xff)
	g.mac[a] = mac
	g.b.AddNetdev(a, "en"+slotName(a), mac)
}

// finish adds the RDMA side of every EFA in address order (the kernel's
// uverbs order), with the GUIDs and GIDs the p5 fixture gives them.
func (g *gen) finish() {
	g.b.Attr("module/efa/version", "2.13.0g") // the out-of-tree driver, as on the p5 fixture
	slices.Sort(g.rdma)
	for i, a := range g.rdma {
		mac := fmt.Sprintf("0e:%02x:ef:a0:%02x:%02x", seed, byte((i+1)>>8), byte(i+1))
		if n, ok := g.eni[a]; ok {
			mac = g.mac[n]
		}
		g.b.AddEFA(fakesys.EFA{
			Addr: a, IBName: "rdma" + slotName(a), Rate: rate100,
			NodeGUID: fmt.Sprintf("cd77:f833:00%02x:%04x", seed, 0x1001+i),
			P2P:      "NVIDIA", GID: eui64GID(mac),
		})
	}
}

// addr is the canonical address of bus:slot.0 in domain dom.
func addr(dom, bus, slot int) string { return fmt.Sprintf("%04x:%02x:%02x.0", dom, bus, slot) }

// slotName is the PCI path part of udev's names: p79s0, and P1p79s0 in
// domain 1 (rdma-core's rdmap79s0 and rdmaP1p79s0).
func slotName(a string) string {
	dom, _ := strconv.ParseUint(a[:4], 16, 16)
	bus, _ := strconv.ParseUint(a[5:7], 16, 8)
	slot, _ := strconv.ParseUint(a[8:10], 16, 8)
	s := fmt.Sprintf("p%ds%d", bus, slot)
	if dom != 0 {
		s = fmt.Sprintf("P%d", dom) + s
	}
	return s
}

// eui64GID is the link-local GID that EUI-64 makes from a MAC.
func eui64GID(mac string) string {
	var b [6]byte
	for i, p := range strings.Split(mac, ":") {
		v, _ := strconv.ParseUint(p, 16, 8)
		b[i] = byte(v)
	}
	return fmt.Sprintf("fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x", b[0]^2, b[1], b[2], b[3], b[4], b[5])
}
