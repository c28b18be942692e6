// Package fakesys builds sysfs trees shaped like the kernel's, one device a
// call, for fixtures and tests. Every PCI function lives at its real path
// under devices/pci<domain>:<bus>/..., and the class and bus directories
// hold relative symbolic links to it, as on a live machine.
package fakesys

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// Builder accumulates a sysfs tree.
type Builder struct {
	entries map[string]sysfs.Entry
	pci     map[string]string // canonical address -> real directory
	uverbs  int
	iommu   int
}

// New returns an empty tree with the directories every kernel has.
func New() *Builder {
	b := &Builder{entries: make(map[string]sysfs.Entry), pci: make(map[string]string)}
	for _, d := range []string{"bus/pci/devices", "bus/pci/drivers", "class/infiniband", "class/infiniband_verbs", "class/net", "devices/system/node", "kernel/iommu_groups"} {
		b.Dir(d)
	}
	return b
}

// File adds a file holding data exactly.
func (b *Builder) File(p, data string) {
	b.entries[p] = sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(data)}
}

// FileMode adds a file with the given permission bits.
func (b *Builder) FileMode(p, data string, mode uint32) {
	b.entries[p] = sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(data), Mode: fsMode(mode)}
}

// Attr adds a sysfs attribute: value plus the newline the kernel prints.
func (b *Builder) Attr(p, value string) { b.File(p, value+"\n") }

// Dir adds an (empty) directory.
func (b *Builder) Dir(p string) { b.entries[p] = sysfs.Entry{Path: p, Kind: sysfs.KindDir} }

// Link adds a symbolic link at p pointing at the root-relative path to,
// written relative to p's directory as the kernel writes them.
func (b *Builder) Link(p, to string) { b.RawLink(p, Rel(path.Dir(p), to)) }

// RawLink adds a symbolic link with the target exactly as given.
func (b *Builder) RawLink(p, target string) {
	b.entries[p] = sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: target}
}

// Remove deletes p and everything below it.
func (b *Builder) Remove(p string) {
	for k := range b.entries {
		if k == p || strings.HasPrefix(k, p+"/") {
			delete(b.entries, k)
		}
	}
}

// Entries returns the tree, sorted by path.
func (b *Builder) Entries() []sysfs.Entry {
	out := make([]sysfs.Entry, 0, len(b.entries))
	for _, e := range b.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// FS returns the tree as an in-memory file system.
func (b *Builder) FS() *sysfs.MemFS {
	m, err := sysfs.NewMemFS(b.Entries())
	if err != nil {
		panic(err) // a builder bug, not input
	}
	return m
}

// Rel returns the relative path from directory dir to target, both
// root-relative.
func Rel(dir, target string) string {
	d := strings.Split(dir, "/")
	t := strings.Split(target, "/")
	// The common ancestor is at most the target's parent, as the kernel's
	// kernfs_get_target_path has it: a link to an ancestor climbs above it
	// and names it (../../../0000:00:06.0, never ../..).
	i := 0
	for i < len(d) && i < len(t)-1 && d[i] == t[i] {
		i++
	}
	var parts []string
	for range d[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	return strings.Join(parts, "/")
}

// Product sets the DMI product name (the EC2 instance type).
func (b *Builder) Product(name string) {
	b.Attr("devices/virtual/dmi/id/product_name", name)
	b.Attr("devices/virtual/dmi/id/sys_vendor", "Amazon EC2")
	b.Link("class/dmi/id", "devices/virtual/dmi/id")
}

// NUMANodes adds NUMA nodes 0..len(cpulists)-1 with their CPU lists and a
// distance table: 10 to itself, far to the others; one node a socket.
func (b *Builder) NUMANodes(far int, cpulists ...string) {
	b.NUMANodesPerSocket(1, far, far, cpulists...)
}

// NUMANodesPerSocket is NUMANodes on sockets of perSocket nodes each:
// node i is on socket i/perSocket, at distance near from the other nodes of
// its socket and far from the rest.
func (b *Builder) NUMANodesPerSocket(perSocket, near, far int, cpulists ...string) {
	n := len(cpulists)
	for i, cl := range cpulists {
		dir := fmt.Sprintf("devices/system/node/node%d", i)
		b.Attr(dir+"/cpulist", cl)
		var d []string
		for j := 0; j < n; j++ {
			switch {
			case i == j:
				d = append(d, "10")
			case i/perSocket == j/perSocket:
				d = append(d, fmt.Sprint(near))
			default:
				d = append(d, fmt.Sprint(far))
			}
		}
		b.Attr(dir+"/distance", strings.Join(d, " "))
		cpus, err := pcie.ParseCPUList(cl)
		if err != nil {
			panic(err)
		}
		for _, c := range cpus {
			b.Attr(fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", c), fmt.Sprint(i/perSocket))
		}
	}
	if n > 0 {
		r := "0"
		if n > 1 {
			r = fmt.Sprintf("0-%d", n-1)
		}
		b.Attr("devices/system/node/online", r)
		b.Attr("devices/system/node/possible", r)
	}
}

// PCI describes one PCI function.
type PCI struct {
	Addr      string // canonical, 0000:4f:00.0
	Parent    string // upstream bridge address; "" for a device on a root bus
	Vendor    uint16
	Device    uint16
	SubVendor uint16 // defaults to Vendor
	SubDevice uint16 // defaults to Device
	Class     uint32
	Revision  uint8
	Driver    string // bound driver; "" for none
	NUMA      int    // -1 for none
	CPUs      string // local_cpulist; "" means every CPU (taken from the caller)
}

// AddPCI adds a PCI function with its attributes, its driver and IOMMU
// group links and its bus/pci/devices link, and returns its real directory.
func (b *Builder) AddPCI(d PCI) string {
	var dir string
	if d.Parent == "" {
		dom, bus := d.Addr[:4], d.Addr[5:7]
		dir = fmt.Sprintf("devices/pci%s:%s/%s", dom, bus, d.Addr)
		b.Dir(fmt.Sprintf("devices/pci%s:%s", dom, bus))
	} else {
		p, ok := b.pci[d.Parent]
		if !ok {
			panic("fakesys: parent " + d.Parent + " of " + d.Addr + " not added yet")
		}
		dir = p + "/" + d.Addr
	}
	b.pci[d.Addr] = dir
	if d.SubVendor == 0 {
		d.SubVendor = d.Vendor
	}
	if d.SubDevice == 0 {
		d.SubDevice = d.Device
	}
	b.Attr(dir+"/vendor", fmt.Sprintf("0x%04x", d.Vendor))
	b.Attr(dir+"/device", fmt.Sprintf("0x%04x", d.Device))
	b.Attr(dir+"/subsystem_vendor", fmt.Sprintf("0x%04x", d.SubVendor))
	b.Attr(dir+"/subsystem_device", fmt.Sprintf("0x%04x", d.SubDevice))
	b.Attr(dir+"/class", fmt.Sprintf("0x%06x", d.Class))
	b.Attr(dir+"/revision", fmt.Sprintf("0x%02x", d.Revision))
	b.Attr(dir+"/numa_node", fmt.Sprint(d.NUMA))
	b.Attr(dir+"/local_cpulist", d.CPUs)
	b.Attr(dir+"/modalias", fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
		d.Vendor, d.Device, d.SubVendor, d.SubDevice, d.Class>>16, (d.Class>>8)&0xff, d.Class&0xff))
	ue := ""
	if d.Driver != "" {
		ue = "DRIVER=" + d.Driver + "\n"
	}
	ue += fmt.Sprintf("PCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\nPCI_SLOT_NAME=%s\nMODALIAS=pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X\n",
		d.Class, d.Vendor, d.Device, d.SubVendor, d.SubDevice, d.Addr,
		d.Vendor, d.Device, d.SubVendor, d.SubDevice, d.Class>>16, (d.Class>>8)&0xff, d.Class&0xff)
	b.File(dir+"/uevent", ue)
	b.FileMode(dir+"/remove", "", 0o200)
	b.Attr(dir+"/enable", "1")
	if d.Driver != "" {
		drv := "bus/pci/drivers/" + d.Driver
		b.Dir(drv)
		b.Link(dir+"/driver", drv)
		b.Link(drv+"/"+d.Addr, dir)
	}
	if d.Class>>8 != 0x0604 {
		g := fmt.Sprintf("kernel/iommu_groups/%d", b.iommu)
		b.iommu++
		b.Link(dir+"/iommu_group", g)
		b.Link(g+"/devices/"+d.Addr, dir)
	}
	b.Link(dir+"/subsystem", "bus/pci")
	b.Link("bus/pci/devices/"+d.Addr, dir)
	return dir
}

// PCIDir returns the real directory of an added PCI function.
func (b *Builder) PCIDir(addr string) string { return b.pci[addr] }

// EFA describes the RDMA side of an EFA function added with AddPCI.
type EFA struct {
	Addr     string // the PCI function
	IBName   string // rdmap79s0 or efa_0
	Rate     string // "100 Gb/sec (4X EDR)"
	NodeGUID string // "cd77:f833:0000:1001"
	GID      string // ports/1/gids/0
	P2P      string // out-of-tree driver's p2p file; "" leaves it out
}

// AddEFA adds the infiniband device, its port, counters and uverbs device
// under the PCI function, and the class links. uverbs numbers are given in
// call order, so call it in PCI bus order as the kernel probes.
func (b *Builder) AddEFA(e EFA) {
	dir := b.pci[e.Addr]
	if dir == "" {
		panic("fakesys: EFA " + e.Addr + " has no PCI function")
	}
	ib := dir + "/infiniband/" + e.IBName
	b.Attr(ib+"/node_type", "7: unspecified")
	b.Attr(ib+"/node_guid", e.NodeGUID)
	b.Attr(ib+"/sys_image_guid", "0000:0000:0000:0000")
	b.Attr(ib+"/fw_ver", "")
	b.Attr(ib+"/node_desc", e.IBName)
	b.Link(ib+"/device", dir)
	b.Link(ib+"/subsystem", "class/infiniband")
	for _, c := range []string{"submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd", "alloc_pd_err", "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err", "lifespan"} {
		b.Attr(ib+"/hw_counters/"+c, "0")
	}
	port := ib + "/ports/1"
	b.Attr(port+"/state", "4: ACTIVE")
	b.Attr(port+"/phys_state", "5: LinkUp")
	b.Attr(port+"/link_layer", "Unknown")
	b.Attr(port+"/rate", e.Rate)
	b.Attr(port+"/lid", "0x0")
	b.Attr(port+"/sm_lid", "0x0")
	b.Attr(port+"/gids/0", e.GID)
	b.Attr(port+"/pkeys/0", "0xffff")
	for _, c := range []string{"tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes", "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "lifespan"} {
		b.Attr(port+"/hw_counters/"+c, "0")
	}
	b.Link("class/infiniband/"+e.IBName, ib)

	n := b.uverbs
	b.uverbs++
	uv := fmt.Sprintf("%s/infiniband_verbs/uverbs%d", dir, n)
	b.Attr(uv+"/ibdev", e.IBName)
	b.Attr(uv+"/abi_version", "1")
	b.Attr(uv+"/dev", fmt.Sprintf("231:%d", 192+n))
	b.Link(uv+"/device", dir)
	b.Link(uv+"/subsystem", "class/infiniband_verbs")
	b.Link(fmt.Sprintf("class/infiniband_verbs/uverbs%d", n), uv)
	if e.P2P != "" {
		b.Attr(dir+"/p2p", e.P2P)
	}
}

// AddNetdev adds a network interface under a PCI function (an ENA).
func (b *Builder) AddNetdev(addr, ifname, mac string) {
	dir := b.pci[addr]
	if dir == "" {
		panic("fakesys: netdev " + ifname + " has no PCI function " + addr)
	}
	nd := dir + "/net/" + ifname
	b.Attr(nd+"/address", mac)
	b.Attr(nd+"/operstate", "up")
	b.Attr(nd+"/mtu", "9001")
	b.Attr(nd+"/ifindex", fmt.Sprint(2+len(b.pci)))
	b.Link(nd+"/device", dir)
	b.Link("class/net/"+ifname, nd)
}

// Neuron describes the neuron driver's class device for Neuron index N.
type Neuron struct {
	Index      int
	CoreCount  int
	Connected  []int
	ArchType   string // NDv2
	Instance   string // Trn1
	DeviceName string // Trainium1
}

// AddNeuron adds devices/virtual/neuron_device/neuronN, which the driver
// creates without a link to its PCI function.
func (b *Builder) AddNeuron(n Neuron) {
	dir := fmt.Sprintf("devices/virtual/neuron_device/neuron%d", n.Index)
	b.File(dir+"/core_count", fmt.Sprint(n.CoreCount)) // printed without a newline
	var c []string
	for _, x := range n.Connected {
		c = append(c, fmt.Sprint(x))
	}
	b.Attr(dir+"/connected_devices", strings.Join(c, ", "))
	b.Attr(dir+"/info/architecture/arch_type", n.ArchType)
	b.Attr(dir+"/info/architecture/instance_type", n.Instance)
	b.Attr(dir+"/info/architecture/device_name", n.DeviceName)
	b.Attr(dir+"/dev", fmt.Sprintf("240:%d", n.Index))
	b.Link(dir+"/subsystem", "class/neuron_device")
	b.Link(fmt.Sprintf("class/neuron_device/neuron%d", n.Index), dir)
}

func fsMode(m uint32) fs.FileMode { return fs.FileMode(m) }

// ExpressConfig returns the 4096 bytes of a PCI Express function's config
// space as its config file gives them to a privileged reader: vendor and
// device IDs, and an extended capability chain of Advanced Error Reporting
// (0x0001 at 0x100) followed, when acs is not nil, by ACS (0x000d at
// 0x148) with acs's registers.
func ExpressConfig(vendor, device uint16, acs *pcie.ACS) []byte {
	c := make([]byte, 4096 /* a PCI Express function's config space */)
	binary.LittleEndian.PutUint16(c[0:], vendor)
	binary.LittleEndian.PutUint16(c[2:], device)
	aer := uint32(0x0001) | 2<<16 // ID, version 2, next 0
	if acs != nil {
		aer |= 0x148 << 20
		binary.LittleEndian.PutUint32(c[0x148:], uint32(0x000d)|1<<16)
		binary.LittleEndian.PutUint16(c[0x14c:], acs.Capability)
		binary.LittleEndian.PutUint16(c[0x14e:], acs.Control)
	}
	binary.LittleEndian.PutUint32(c[0x100:], aer)
	return c
}

// Config writes a function's config file (added with AddPCI) with data.
func (b *Builder) Config(addr string, data []byte) {
	dir := b.pci[addr]
	if dir == "" {
		panic("fakesys: config of " + addr + ", which has no PCI function")
	}
	b.entries[dir+"/config"] = sysfs.Entry{Path: dir + "/config", Kind: sysfs.KindFile, Data: data, Mode: fsMode(0o644)}
}

// Renamed is entries with every occurrence of old in a path, a link target
// or a file's content replaced by new: a device the kernel (or a hostile
// capture) named new. It also returns how many paths held old.
func Renamed(entries []sysfs.Entry, old, new string) ([]sysfs.Entry, int) {
	out := make([]sysfs.Entry, 0, len(entries))
	n := 0
	for _, e := range entries {
		if strings.Contains(e.Path, old) {
			n++
		}
		e.Path = strings.ReplaceAll(e.Path, old, new)
		e.Target = strings.ReplaceAll(e.Target, old, new)
		e.Data = []byte(strings.ReplaceAll(string(e.Data), old, new))
		out = append(out, e)
	}
	return out, n
}

// WriteTree writes entries under dir as they are, names the kernel would
// refuse included. sysfs.WriteDir refuses paths that are not valid UTF-8,
// as io/fs does; a directory can hold them.
func WriteTree(dir string, entries []sysfs.Entry) error {
	for _, e := range entries {
		p := filepath.Join(dir, e.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		switch e.Kind {
		case sysfs.KindDir:
			err = os.MkdirAll(p, 0o755)
		case sysfs.KindFile:
			err = os.WriteFile(p, e.Data, 0o644)
		case sysfs.KindLink:
			err = os.Symlink(e.Target, p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
