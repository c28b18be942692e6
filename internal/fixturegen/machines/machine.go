package machines

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fakesys"
)

// PCI vendors and classes the fixtures use.
const (
	amazon   = 0x1d0f
	nvidia   = 0x10de
	intel    = 0x8086
	mellanox = 0x15b3

	classHostBridge = 0x060000
	classPCIBridge  = 0x060400
	classVGA        = 0x030000
	class3D         = 0x030200
	classEthernet   = 0x020000
	classInfiniBand = 0x020700
	classNVMe       = 0x010802
	classBridgeMisc = 0x068000 // NVSwitch
	classSystemMisc = 0x088000 // Neuron [inf]
)

// What a fixture holds, counted by role for its summary.
type role int

const (
	roleGPU role = iota
	roleEFA
	roleNeuron
	roleMLX5
	roleNVSwitch
	roleENA
	roleNVMe
	roleBridge
	numRoles

	roleNone role = -1 // not counted: host bridge, VGA
)

var roleNames = [numRoles]string{"GPU", "EFA", "Neuron", "mlx5", "NVSwitch", "ENA", "NVMe", "bridge port"}

// held counts the functions of one role and the vendor:device IDs among them.
type held struct {
	n   int
	ids []string
}

// machine is one fixture under construction: a fakesys tree plus what the
// fixture's note says about it.
type machine struct {
	*fakesys.Builder
	seed     int      // makes MACs, GUIDs and GIDs differ between fixtures
	nodes    []string // CPU list per NUMA node
	all      string   // every CPU, for devices without a NUMA node
	p2p      string   // the out-of-tree efa driver's p2p file on every EFA; "" for none
	zeroGUID bool     // EFA node_guid all zeros (first-generation EFA)

	rdma       []rdma
	held       [numRoles]held
	neuronDevs int
	macs       int
	enaMAC     map[string]string // ENA address -> its netdev's MAC
	eniOf      map[string]string // EFA address -> the ENA of the same interface
	notes      []note
}

// A note is one provenance line of a fixture: tag is seen, src or inf.
type note struct{ tag, text string }

func (n note) String() string { return "[" + n.tag + "] " + n.text }

// newMachine starts a fixture for instance type product with the given
// NUMA nodes (CPU lists) and distance between them.
func newMachine(product string, seed, far int, all string, nodes ...string) *machine {
	return newMachineSockets(product, seed, 1, far, far, all, nodes...)
}

// newMachineSockets is newMachine on sockets of perSocket NUMA nodes, near
// apart within a socket and far across.
func newMachineSockets(product string, seed, perSocket, near, far int, all string, nodes ...string) *machine {
	m := &machine{Builder: fakesys.New(), seed: seed, nodes: nodes, all: all,
		enaMAC: make(map[string]string), eniOf: make(map[string]string)}
	m.Product(product)
	m.NUMANodesPerSocket(perSocket, near, far, nodes...)
	// The loopback interface: a class/net entry with no PCI device.
	m.Attr("devices/virtual/net/lo/address", "00:00:00:00:00:00")
	m.Attr("devices/virtual/net/lo/operstate", "unknown")
	m.Attr("devices/virtual/net/lo/mtu", "65536")
	m.Attr("devices/virtual/net/lo/ifindex", "1")
	m.Link("class/net/lo", "devices/virtual/net/lo")
	return m
}

// Seen, Src and Inf record the fixture's provenance notes, tagged as in
// docs/hardware.md: seen on a real machine, read in source, or inferred.
func (m *machine) Seen(format string, a ...any) { m.note("seen", format, a...) }
func (m *machine) Src(format string, a ...any)  { m.note("src", format, a...) }
func (m *machine) Inf(format string, a ...any)  { m.note("inf", format, a...) }

func (m *machine) note(tag, format string, a ...any) {
	m.notes = append(m.notes, note{tag, fmt.Sprintf(format, a...)})
}

func (m *machine) cpus(node int) string {
	if node < 0 {
		return m.all
	}
	return m.nodes[node]
}

func (m *machine) count(r role, vendor, device uint16) {
	h := &m.held[r]
	h.n++
	id := fmt.Sprintf("%04x:%04x", vendor, device)
	if !slices.Contains(h.ids, id) {
		h.ids = append(h.ids, id)
	}
}

// fn adds one PCI function with its NUMA node's CPU list.
func (m *machine) fn(r role, addr, parent string, node int, vendor, device uint16, class uint32, rev uint8, driver string) string {
	if r != roleNone {
		m.count(r, vendor, device)
	}
	dir := m.AddPCI(fakesys.PCI{
		Addr: addr, Parent: parent, Vendor: vendor, Device: device, Class: class,
		Revision: rev, Driver: driver, NUMA: node, CPUs: m.cpus(node),
	})
	m.deviceFiles(dir, r, device)
	return dir
}

// bridge adds an Amazon PCIe bridge port (1d0f:0200) forwarding buses
// secondary..subordinate.
func (m *machine) bridge(addr, parent string, node, secondary, subordinate int) {
	dir := m.fn(roleBridge, addr, parent, node, amazon, 0x0200, classPCIBridge, 0, "pcieport")
	m.Attr(dir+"/secondary_bus_number", strconv.Itoa(secondary))
	m.Attr(dir+"/subordinate_bus_number", strconv.Itoa(subordinate))
}

// legacyBus adds root bus 0 as every Nitro instance has it: the emulated
// host bridge, the VGA function and the EBS root volume.
func (m *machine) legacyBus(node int) {
	m.fn(roleNone, "0000:00:00.0", "", node, intel, 0x1237, classHostBridge, 0x02, "")
	m.fn(roleNone, "0000:00:03.0", "", node, amazon, 0x1111, classVGA, 0, "")
	m.fn(roleNVMe, "0000:00:04.0", "", node, amazon, 0x8061, classNVMe, 0, "nvme")
}

// A device adds one endpoint function at addr below parent ("" for a
// function on a root bus).
type device func(m *machine, addr, parent string, node int)

func gpu(id uint16) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleGPU, addr, parent, node, nvidia, id, class3D, 0xa1, "nvidia")
	}
}

func nvswitch(id uint16) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleNVSwitch, addr, parent, node, nvidia, id, classBridgeMisc, 0xa1, "nvidia")
	}
}

// nvme is a local instance-store disk (1d0f:cd01).
func nvme() device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleNVMe, addr, parent, node, amazon, 0xcd01, classNVMe, 0, "nvme")
	}
}

func neuron(id uint16) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleNeuron, addr, parent, node, amazon, id, classSystemMisc, 0, "neuron-driver")
	}
}

// ena adds an ENA function with its netdev; ifname "" names it as systemd
// does from the address (enp71s0).
func ena(ifname string) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleENA, addr, parent, node, amazon, 0xec20, classEthernet, 0, "ena")
		ifname := ifname
		if ifname == "" {
			bus, slot, _ := splitAddr(addr)
			ifname = fmt.Sprintf("enp%ds%d", bus, slot)
		}
		m.macs++
		mac := fmt.Sprintf("02:%02x:0e:4a:%02x:%02x", m.seed, m.macs>>8, m.macs&0xff)
		m.enaMAC[addr] = mac
		m.AddNetdev(addr, ifname, mac)
	}
}

// eni records that the EFA at efaAddr and the ENA at enaAddr are the two
// functions of one EFA network interface: the EFA's GID is then the EUI-64
// link-local address of the ENA's MAC.
func (m *machine) eni(efaAddr, enaAddr string) { m.eniOf[efaAddr] = enaAddr }

// eui64GID is the link-local GID that EUI-64 makes from mac.
func eui64GID(mac [6]byte) string {
	return fmt.Sprintf("fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^2, mac[1], mac[2], mac[3], mac[4], mac[5])
}

func parseMAC(s string) [6]byte {
	var b [6]byte
	for i, p := range strings.Split(s, ":") {
		v, err := strconv.ParseUint(p, 16, 8)
		if err != nil || i >= 6 {
			panic("fixturegen: bad MAC " + s)
		}
		b[i] = byte(v)
	}
	return b
}

// rdma is an RDMA device whose infiniband side is added once the whole PCI
// tree is known, in bus order, as the kernel numbers uverbs devices.
type rdma struct {
	addr, name, rate string
	mlx5             bool
}

// efa adds an EFA function; name "" gives the name rdma-core's udev rule
// gives (rdmap79s0).
func efa(id uint16, rate, name string) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleEFA, addr, parent, node, amazon, id, classEthernet, 0, "efa")
		name := name
		if name == "" {
			name = rdmapName(addr)
		}
		m.rdma = append(m.rdma, rdma{addr: addr, name: name, rate: rate})
	}
}

// mlx5 adds a ConnectX-7 function (15b3:1021 [inf]) in InfiniBand mode.
func mlx5(name, rate string) device {
	return func(m *machine, addr, parent string, node int) {
		m.fn(roleMLX5, addr, parent, node, mellanox, 0x1021, classInfiniBand, 0, "mlx5_core")
		m.rdma = append(m.rdma, rdma{addr: addr, name: name, rate: rate, mlx5: true})
	}
}

// at places a device: n is a bus number or a port index, as the caller says.
type at struct {
	n   int
	dev device
}

// flatRoot adds functions straight on root bus bus (no bridges), at slot.0
// for each at.
func (m *machine) flatRoot(bus, node int, devs ...at) {
	for _, d := range devs {
		d.dev(m, addr(bus, d.n), "", node)
	}
}

// A port is a downstream port of a PCIe switch at (downstream bus):slot.fn,
// leading to bus; dev is nil for a port with nothing below it.
type port struct {
	slot, fn, bus int
	dev           device
}

// pcieSwitch adds an Amazon switch under its own host bridge: root port
// root:00.0 [root+1..last] -> upstream port (root+1):00.0 [root+2..last] ->
// the downstream ports on bus root+2, each with its endpoint at bus:00.0.
func (m *machine) pcieSwitch(root, last, node int, ports []port) {
	rp, up := addr(root, 0), addr(root+1, 0)
	m.bridge(rp, "", node, root+1, last)
	m.bridge(up, rp, node, root+2, last)
	for _, p := range ports {
		if p.bus <= root+2 || p.bus > last {
			panic(fmt.Sprintf("fixturegen: port bus %#x outside %#x..%#x", p.bus, root+3, last))
		}
		dp := fmt.Sprintf("0000:%02x:%02x.%d", root+2, p.slot, p.fn)
		m.bridge(dp, up, node, p.bus, p.bus)
		if p.dev != nil {
			p.dev(m, addr(p.bus, 0), dp, node)
		}
	}
}

// sparsePorts gives each endpoint (at.n = its bus) its own downstream port
// numbered by the bus it leads to: bus 0x47 behind 46:01.0, as on p5.
func sparsePorts(root int, devs ...at) []port {
	var ps []port
	for _, d := range devs {
		ps = append(ps, port{slot: d.n - (root + 2), bus: d.n, dev: d.dev})
	}
	slices.SortFunc(ps, func(a, b port) int { return cmp.Compare(a.bus, b.bus) })
	return ps
}

// densePorts gives the switch n downstream ports, slot i/8 function i%8,
// port i leading to bus root+3+i, as on p5en (46:00.0-46:02.5); at.n is the
// port index, and ports without a device are empty.
func densePorts(root, n int, devs ...at) []port {
	ps := make([]port, n)
	for i := range ps {
		ps[i] = port{slot: i / 8, fn: i % 8, bus: root + 3 + i}
	}
	for _, d := range devs {
		ps[d.n].dev = d.dev
	}
	return ps
}

// finish adds the RDMA side of every EFA and mlx5 function in PCI address
// order, so that uverbs numbers follow the bus order.
func (m *machine) finish() *machine {
	m.efaModule()
	m.noteDeviceFiles()
	for e, n := range m.eniOf {
		if m.PCIDir(e) == "" || m.enaMAC[n] == "" {
			panic("fixturegen: interface pairs EFA " + e + " with ENA " + n + ", one of which is missing")
		}
	}
	slices.SortFunc(m.rdma, func(a, b rdma) int { return strings.Compare(a.addr, b.addr) })
	for i, r := range m.rdma {
		if r.mlx5 {
			m.addMLX5(r, i)
			continue
		}
		guid := fmt.Sprintf("cd77:f833:00%02x:%04x", m.seed, 0x1001+i)
		if m.zeroGUID {
			guid = "0000:0000:0000:0000"
		}
		// An EFA-only interface has no ENA: its MAC is a locally
		// administered 0e:SS:ef:a0:NN:NN that no netdev carries.
		mac := [6]byte{0x0e, byte(m.seed), 0xef, 0xa0, byte((i + 1) >> 8), byte(i + 1)}
		if n, ok := m.eniOf[r.addr]; ok {
			mac = parseMAC(m.enaMAC[n])
		}
		m.AddEFA(fakesys.EFA{Addr: r.addr, IBName: r.name, Rate: r.rate, NodeGUID: guid, P2P: m.p2p, GID: eui64GID(mac)})
	}
	return m
}

// addMLX5 adds a Mellanox RDMA device with AddEFA's layout (so that its
// uverbs number takes its place in bus order) and then rewrites what differs.
func (m *machine) addMLX5(r rdma, i int) {
	guid := fmt.Sprintf("a088:c203:00%02x:%04x", m.seed, 0x7c40+i)
	m.AddEFA(fakesys.EFA{Addr: r.addr, IBName: r.name, Rate: r.rate, NodeGUID: guid, GID: "fe80:0000:0000:0000:" + guid})
	ib := m.PCIDir(r.addr) + "/infiniband/" + r.name
	port := ib + "/ports/1"
	m.Remove(ib + "/hw_counters")
	m.Remove(port + "/hw_counters")
	m.Attr(ib+"/node_type", "1: CA")
	m.Attr(ib+"/sys_image_guid", guid)
	m.Attr(ib+"/fw_ver", "28.39.1002")
	m.Attr(ib+"/hca_type", "MT4129")
	m.Attr(ib+"/board_id", "MT_0000000838")
	m.Attr(ib+"/hw_rev", "0x0")
	m.Attr(ib+"/node_desc", "MT4129 ConnectX7   Mellanox Technologies")
	m.Attr(port+"/link_layer", "InfiniBand")
	m.Attr(port+"/lid", fmt.Sprintf("0x%x", i+2))
	m.Attr(port+"/sm_lid", "0x1")
	m.Attr(port+"/lid_mask_count", "0")
	m.Attr(port+"/sm_sl", "0")
	for _, c := range []string{"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_rcv_errors", "symbol_error", "link_downed"} {
		m.Attr(port+"/counters/"+c, "0")
	}
	for _, c := range []string{"out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err", "local_ack_timeout_err", "lifespan"} {
		m.Attr(port+"/hw_counters/"+c, "0")
	}
}

// addNeurons adds the neuron driver's class devices neuron0..neuronN-1 with
// the torus neighbours of each.
func (m *machine) addNeurons(cores int, arch, inst, name string, torus [][]int) {
	for i, nb := range torus {
		m.AddNeuron(fakesys.Neuron{Index: i, CoreCount: cores, Connected: nb, ArchType: arch, Instance: inst, DeviceName: name})
		m.neuronDevs++
	}
}

// addr is the canonical address of function 0 of bus:slot in domain 0.
func addr(bus, slot int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, slot) }

// splitAddr returns the bus, slot and function of a canonical address.
func splitAddr(addr string) (bus, slot, fn int) {
	b, _ := strconv.ParseUint(addr[5:7], 16, 8)
	s, _ := strconv.ParseUint(addr[8:10], 16, 8)
	f, _ := strconv.ParseUint(addr[11:], 16, 8)
	return int(b), int(s), int(f)
}

// rdmapName is the name rdma-core's udev rule gives an EFA: rdmap<bus>s<slot>
// in decimal, with f<fn> for a function other than 0.
func rdmapName(addr string) string {
	bus, slot, fn := splitAddr(addr)
	s := fmt.Sprintf("rdmap%ds%d", bus, slot)
	if fn != 0 {
		s += fmt.Sprintf("f%d", fn)
	}
	return s
}

// holds summarises what the fixture holds, for its header and the README.
func (m *machine) holds() string {
	var parts []string
	for r := range numRoles {
		h := m.held[r]
		if h.n == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", h.n, roleNames[r], strings.Join(h.ids, ", ")))
		if r == roleNeuron {
			parts = append(parts, fmt.Sprintf("%d neuron_device class devices", m.neuronDevs))
		}
	}
	return strings.Join(parts, ", ")
}
