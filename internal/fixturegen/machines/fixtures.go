package machines

import (
	"fmt"
	"strings"
)

// A fixture is one instance type's synthetic sysfs tree, written to
// testdata/sysfs/<name>.sysfs.
type fixture struct {
	name  string
	build func() *machine
}

var fixtures = []fixture{
	{"p4d.24xlarge", p4d},
	{"p4de.24xlarge", p4de},
	{"p5.48xlarge", p5},
	{"p5e.48xlarge", p5e},
	{"p5en.48xlarge", p5en},
	{"p6-b200.48xlarge", p6b200},
	{"p6-b300.48xlarge", p6b300},
	{"p6e-gb200.36xlarge", p6egb200},
	{"trn1.32xlarge", trn1},
	{"trn1n.32xlarge", trn1n},
	{"trn2.48xlarge", trn2},
	{"g5.8xlarge", g5},
	{"m5.xlarge", m5},
}

// EFA port rates.
const (
	rate100 = "100 Gb/sec (4X EDR)"
	rate200 = "200 Gb/sec (4X HDR)"
	rate400 = "400 Gb/sec (8X HDR)"
)

// CPU lists of the two-socket 192-vCPU hosts (p5, p5en, p6-b200, trn2).
const (
	cpus192      = "0-191"
	cpus192Node0 = "0-47,96-143"
	cpus192Node1 = "48-95,144-191"
)

// torus4x4 is the trn1 Neuron torus (device: its neighbours) from
// docs/hardware.md.
var torus4x4 = [][]int{
	{12, 3, 4, 1}, {13, 0, 5, 2}, {14, 1, 6, 3}, {15, 2, 7, 0},
	{0, 7, 8, 5}, {1, 4, 9, 6}, {2, 5, 10, 7}, {3, 6, 11, 4},
	{4, 11, 12, 9}, {5, 8, 13, 10}, {6, 9, 14, 11}, {7, 10, 15, 8},
	{8, 15, 0, 13}, {9, 12, 1, 14}, {10, 13, 2, 15}, {11, 14, 3, 12},
}

// p4d: no switches; each of four root buses holds an ENA, an EFA, two GPUs
// and two NVMe disks.
func p4d() *machine {
	m := a100("p4d.24xlarge", 1, 0x20b0)
	m.Seen("roots pci0000:10, :20, :90, :a0 with no bridges; on each XX:1b.0 EFA 1d0f:efa0, XX:1c.0 and XX:1d.0 A100 10de:20b0, XX:1e.0 and XX:1f.0 NVMe")
	m.Seen("EFA names rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27; rate %q; node_guid all zeros", rate100)
	m.Seen("NUMA: roots 10 and 20 on node 0, 90 and a0 on node 1; NVSwitch 10de:1af1 at 80:1a.0")
	m.Src("GPU/NIC pairing and NUMA as aws-ofi-nccl topology/p4d-24xl-topo.xml: GPUs 10:1c and 10:1d with NIC 10:1b (likewise 20, 90, a0); NUMA 0 CPUs 0-23,48-71, NUMA 1 24-47,72-95")
	return a100notes(m)
}

// p4de: p4d with the 80 GB A100 (10de:20b2), as aws-ofi-nccl's
// topology/p4de-24xl-topo.xml lays it out.
func p4de() *machine {
	m := a100("p4de.24xlarge", 10, 0x20b2)
	m.Src("the whole bus layout, GPU 10de:20b2, EFA 1d0f:efa0 and NUMA as aws-ofi-nccl topology/p4de-24xl-topo.xml: GPUs 10:1c and 10:1d with NIC 10:1b (likewise 20, 90, a0), roots 10 and 20 NUMA 0, 90 and a0 NUMA 1")
	m.Inf("everything else as p4d.24xlarge: names, rate, zero node_guid, NVSwitches, ENAs, NVMe")
	return a100notes(m)
}

// a100 lays out p4d and p4de: four flat roots, each ENA, EFA, two A100s
// (device id gpuID) and two NVMe disks; six NVSwitches on root 80.
func a100(product string, seed int, gpuID uint16) *machine {
	m := newMachine(product, seed, 21, "0-95", "0-23,48-71", "24-47,72-95")
	m.zeroGUID = true
	m.p2p = "NVIDIA"
	m.legacyBus(0)
	ifnames := map[int]string{0x10: "ens32"}
	for _, r := range []struct{ bus, node int }{{0x10, 0}, {0x20, 0}, {0x90, 1}, {0xa0, 1}} {
		m.flatRoot(r.bus, r.node,
			at{0x01, ena(ifnames[r.bus])},
			at{0x1b, efa(0xefa0, rate100, "")},
			at{0x1c, gpu(gpuID)}, at{0x1d, gpu(gpuID)},
			at{0x1e, nvme()}, at{0x1f, nvme()})
		m.eni(addr(r.bus, 0x1b), addr(r.bus, 0x01))
	}
	for slot := 0x1a; slot <= 0x1f; slot++ {
		m.flatRoot(0x80, 1, at{slot, nvswitch(0x1af1)})
	}
	return m
}

func a100notes(m *machine) *machine {
	m.Inf("NVSwitches 80:1b.0-80:1f.0 (six in all), their root pci0000:80 on NUMA node 1, driver nvidia")
	m.Inf("one ENA 1d0f:ec20 at XX:01.0 on every root (docs/hardware.md: ENA at XX:01.0), netdevs ens32 (10:01.0), enp32s1, enp144s1, enp160s1")
	m.Inf("each root's ENA and EFA are one EFA interface: the EFA's GID is the EUI-64 link-local address of the ENA's MAC")
	m.Inf("96 vCPUs: node 0 0-23,48-71, node 1 24-47,72-95, distance 21")
	m.Inf("p2p file \"NVIDIA\" on every EFA (out-of-tree efa driver with GPUDirect)")
	m.Inf("the NVMe disks XX:1e.0/XX:1f.0 are local instance store 1d0f:cd01")
	return m.finish()
}

// p5: each GPU and its four EFAs behind one Amazon switch under its own
// host bridge, 0x11 buses apart.
func p5() *machine {
	m := newMachine("p5.48xlarge", 2, 32, cpus192, cpus192Node0, cpus192Node1)
	h100(m, 0x2330, []int{0, 0, 0, 0, 1, 1, 1, 1})
	m.Seen("lstopo -v of a p5.48xlarge (Hugging Face, The Smol Training Playbook, chapter \"Infrastructure\"): host bridge buses [44-54] -> 44:00.0 1d0f:0200 [45-54] -> 45:00.0 1d0f:0200 [46-54] -> 46:01.0 [4f-4f] -> EFA 4f:00.0 1d0f:efa1 rdmap79s0 (node_guid cd77:f833:0000:1001), and 46:01.4 [53-53] -> H100 10de:2330 at 53:00.0; NUMA distance 32")
	m.Src("aws-ofi-nccl topology/p5.48xl-topo.xml (removed in June 2025, in its history): four NICs behind each switch, switch upstream ports 45, 56, 67, 78 (NUMA 0) and 89, 9a, ab, bc (NUMA 1); NICs 4f-52, 60-63, 71-74, 82-85, 93-96, a4-a7, b5-b8, c6-c9")
	m.Seen("GPU buses 53, 64, 75, 86, 97, a8, b9, ca (docs/hardware.md p5 table); 32 x 1d0f:efa1 at rate %q", rate100)
	m.Seen("roots 0x44+0x11*k (44, 55, ..., bb) for the EFAs and the GPUs, 16 EFAs on each of NUMA nodes 0 and 1: Karpenter v1.15.2's tables of what dra.net and NVIDIA's driver published on a real p5.48xlarge")
	m.Inf("192 vCPUs: node 0 0-47,96-143, node 1 48-95,144-191")
	return h100notes(m)
}

// p5e: p5's buses with the H200 (10de:2335), on four NUMA nodes.
func p5e() *machine {
	m := newMachineSockets("p5e.48xlarge", 11, 2, 12, 32, cpus192, "0-23,96-119", "24-47,120-143", "48-71,144-167", "72-95,168-191")
	h100(m, 0x2335, []int{1, 1, 0, 0, 3, 3, 2, 2})
	m.Seen("roots 44, 55, ..., bb (p5's) for the EFAs and the GPUs, 4 EFAs a root; NUMA nodes 0 to 3, 8 EFAs each: roots 66 and 77 on node 0, 44 and 55 on node 1, aa and bb on node 2, 88 and 99 on node 3: Karpenter v1.15.2's tables of what dra.net and NVIDIA's driver published on a real p5e.48xlarge")
	m.Inf("the rest of the layout: p5.48xlarge's (AWS sells p5e as p5 with H200 GPUs), with H200 10de:2335 (docs/hardware.md's p5en GPU); 32 EFA 1d0f:efa1 at %q", rate100)
	m.Inf("192 vCPUs on two sockets of two NUMA nodes each (nodes 0 and 1 on socket 0): node 0 0-23,96-119, node 1 24-47,120-143, node 2 48-71,144-167, node 3 72-95,168-191; distance 12 within a socket, 32 across")
	return h100notes(m)
}

// p5DownPorts is the port count of the p5 switch: ports 46:00.0-46:01.5
// leading to buses root+3..root+0x10.
const p5DownPorts = 14

// h100 lays out p5 and p5e: eight switches, each an ENA port (first switch
// only), four EFAs at ports 8-11, the GPU at port 12 and an NVMe at 13;
// switch k on NUMA node numa[k].
func h100(m *machine, gpuID uint16, numa []int) {
	m.p2p = "NVIDIA"
	m.legacyBus(0)
	for k := range 8 {
		root := 0x44 + 0x11*k
		devs := []at{
			{8, efa(0xefa1, rate100, "")}, {9, efa(0xefa1, rate100, "")},
			{10, efa(0xefa1, rate100, "")}, {11, efa(0xefa1, rate100, "")},
			{12, gpu(gpuID)}, {13, nvme()},
		}
		if k == 0 {
			devs = append(devs, at{0, ena("")})
		}
		m.pcieSwitch(root, root+0x10, numa[k], densePorts(root, p5DownPorts, devs...))
	}
	m.eni(addr(0x4f, 0), addr(0x47, 0))
	for slot := range 4 {
		m.flatRoot(0xe0, 1, at{slot, nvswitch(0x22a3)})
	}
}

func h100notes(m *machine) *machine {
	m.Inf("14 downstream ports 46:00.0-46:01.5 a switch, port i leading to bus root+3+i as on p5en (46:01.0 -> 4f and 46:01.4 -> 53 are seen); ports 1-7 empty")
	m.Inf("one local NVMe 1d0f:cd01 per switch at root+0x10 (54, 65, ..., cb)")
	m.Inf("the only ENA at 47:00.0 (netdev enp71s0) behind the first switch, one interface with EFA rdmap79s0 (whose GID is the EUI-64 of the ENA's MAC); the other 31 EFAs are EFA-only interfaces")
	m.Inf("four NVSwitches 10de:22a3 flat on root pci0000:e0 (e0:00.0-e0:03.0), NUMA node 1, driver nvidia")
	m.Inf("p2p file \"NVIDIA\" on every EFA")
	return m.finish()
}

// p5enPorts is the port count of the p5en switch: ports 46:00.0-46:02.5 leading
// to buses root+3..root+0x18.
const p5enPorts = 22

// p5en: four switches, each 4 ENA, 10 empty ports, 4 EFA, 2 GPUs, 2 NVMe.
func p5en() *machine {
	m := newMachine("p5en.48xlarge", 3, 21, cpus192, cpus192Node0, cpus192Node1)
	m.p2p = "NVIDIA"
	m.legacyBus(0)
	for k, root := range []int{0x44, 0x5d, 0x76, 0x8f} {
		var devs []at
		for i := range 4 {
			devs = append(devs, at{i, ena("")})
		}
		for i := 14; i < 18; i++ {
			devs = append(devs, at{i, efa(0xefa2, rate200, "")})
		}
		devs = append(devs, at{18, gpu(0x2335)}, at{19, gpu(0x2335)}, at{20, nvme()}, at{21, nvme()})
		m.pcieSwitch(root, root+2+p5enPorts, k/2, densePorts(root, p5enPorts, devs...))
		for i := range 4 {
			m.eni(addr(root+3+14+i, 0), addr(root+3+i, 0))
		}
	}
	m.Seen("first switch: pci0000:44 -> 44:00.0 [45-5c] -> 45:00.0 [46-5c] -> 22 downstream ports 46:00.0-46:02.5; buses 47-4a ENA, 4b-54 empty ports, 55-58 EFA 1d0f:efa2, 59-5a H200 10de:2335, 5b-5c NVMe")
	m.Seen("GPU buses 59, 5a, 72, 73, 8b, 8c, a4, a5; EFAs rdmap85s0-88s0, rdmap110s0-113s0, rdmap135s0-138s0, rdmap160s0-163s0")
	m.Seen("a public p5en capture (nvidia-smi, lscpu, numactl --hardware, ibv_devinfo, read through code search) agrees: H200 at 59, 5a, 72, 73, 8b, 8c, a4, a5; EFAs rdmap85s0 ... vendor_part_id 61346, hw_ver 0xEFA2; NUMA node 0 0-47,96-143, node 1 48-95,144-191, distance 21")
	m.Src("EFA buses 55-58, 6e-71, 87-8a, a0-a3, each sharing a PCIe switch with a GPU: the p5en NIC table of the aws-ofi-nccl topology unit test")
	m.Seen("roots pci0000:44, :5d, :76, :8f, each with 4 EFAs and 2 GPUs, the first two on NUMA node 0 and the last two on 1; EFA generation efa2 (dra.net pciSubsystem): Karpenter v1.15.2's tables of what dra.net and NVIDIA's driver published on a real p5en.48xlarge")
	m.Inf("the other three switches: the first switch's layout shifted by 0x19 buses")
	m.Inf("EFA rate %q (docs/hardware.md marks the p5en rate [inf])", rate200)
	m.Inf("all 16 ENA functions bound to ena with a netdev each (enp71s0-enp74s0, enp96s0-enp99s0, enp121s0-enp124s0, enp146s0-enp149s0); the n-th ENA and the n-th EFA of a switch are one EFA interface (47 with 55, 48 with 56, ...): the EFA's GID is the EUI-64 of the ENA's MAC")
	m.Inf("NVMe disks are local instance store 1d0f:cd01; no NVSwitch PCI functions")
	m.Inf("p2p file \"NVIDIA\" on every EFA")
	return m.finish()
}

// p6b200: four switches under roots 44, 55, 66 and 79, each 2 EFAs and 2
// GPUs; two ConnectX-7 functions behind the third.
func p6b200() *machine {
	m := newMachine("p6-b200.48xlarge", 4, 21, cpus192, cpus192Node0, cpus192Node1)
	m.p2p = "NVIDIA"
	m.legacyBus(0)
	// Port indexes (bus root+3+i) of each switch's EFAs, GPUs and disks.
	layout := []struct{ root, efa, gpu, nvme int }{{0x44, 8, 10, 12}, {0x55, 8, 10, 12}, {0x66, 8, 12, -1}, {0x79, 8, 10, 12}}
	for k, l := range layout {
		devs := []at{
			{l.efa, efa(0xefa3, rate400, "")}, {l.efa + 1, efa(0xefa3, rate400, "")},
			{l.gpu, gpu(0x2901)}, {l.gpu + 1, gpu(0x2901)},
		}
		if l.nvme >= 0 {
			devs = append(devs, at{l.nvme, nvme()}, at{l.nvme + 1, nvme()})
		}
		switch k {
		case 0:
			devs = append(devs, at{0, ena("")})
		case 2:
			// buses 0x73 and 0x74: ibp115s0f0, ibp116s0f0
			devs = append(devs, at{10, mlx5("ibp115s0f0", "400 Gb/sec (4X NDR)")}, at{11, mlx5("ibp116s0f0", "400 Gb/sec (4X NDR)")})
		}
		m.pcieSwitch(l.root, l.root+0x10, k/2, densePorts(l.root, p5DownPorts, devs...))
	}
	m.eni(addr(0x4f, 0), addr(0x47, 0))
	m.Seen("8 B200 10de:2901, 8 EFA at %q; two mlx5 RDMA devices ibp115s0f0 and ibp116s0f0 (so at 73:00.0 and 74:00.0) that are not EFA", rate400)
	m.Src("EFA buses 4f, 50, 60, 61, 71, 72, 84, 85 (rdmap79s0, rdmap80s0, rdmap96s0, rdmap97s0, rdmap113s0, rdmap114s0, rdmap132s0, rdmap133s0), each sharing a PCIe switch with a GPU: the p6-b200 NIC table of an aws-ofi-nccl topology unit test (hwloc fixtures of p4d, p5en, p6-b200, p6-b300, p6e-gb200), read through code search")
	m.Src("2 GPUs and 2 NICs per PCIe switch")
	m.Seen("roots pci0000:44, :55, :66, :79, each with 2 EFAs and 2 GPUs, NUMA node 0 for the first two and 1 for the last two; EFA generation efa3 (dra.net pciSubsystem): Karpenter v1.15.2's tables of what dra.net and NVIDIA's driver published on a real p6-b200.48xlarge")
	m.Inf("switch structure: each root with 14 downstream ports leading to root+3..root+0x10; GPUs 51-52, 62-63, 75-76, 86-87; NVMe 1d0f:cd01 at 53-54, 64-65, 88-89; the other ports empty")
	m.Inf("the mlx5 functions sit behind the third switch, beside EFAs rdmap113s0/rdmap114s0 and GPUs 4-5, since their buses fall in its range")
	m.Inf("mlx5: 15b3:1021 (ConnectX-7, MT2910 in pci.ids), class 0x020700, driver mlx5_core, node_type \"1: CA\", hca_type MT4129, board_id MT_0000000838, fw_ver 28.39.1002, link_layer InfiniBand, rate \"400 Gb/sec (4X NDR)\", port ACTIVE with lid and sm_lid, PMA counters; no netdev, no umad devices")
	m.Inf("uverbs numbers follow the bus order across efa and mlx5 together (uverbs6 and uverbs7 are the mlx5 devices)")
	m.Inf("one ENA at 47:00.0 (enp71s0), one interface with EFA rdmap79s0 (GID = EUI-64 of its MAC); no NVSwitch PCI functions (B200 NVSwitches are managed through the mlx5 devices)")
	m.Inf("192 vCPUs: node 0 0-47,96-143, node 1 48-95,144-191, distance 21")
	m.Inf("p2p file \"NVIDIA\" on every EFA")
	return m.finish()
}

// p6b300: eight switches 0xf buses apart from 4b, each 2 EFAs and a GPU; the ENA
// and the two ConnectX-7 functions behind switches of their own.
func p6b300() *machine {
	m := newMachine("p6-b300.48xlarge", 12, 21, cpus192, cpus192Node0, cpus192Node1)
	m.p2p = "NVIDIA"
	m.legacyBus(0)
	m.pcieSwitch(0x44, 0x47, 0, densePorts(0x44, 1, at{0, ena("")}))
	for k := range 8 {
		root := 0x4b + 0xf*k
		m.pcieSwitch(root, root+0xd, k/4, densePorts(root, 11,
			at{8, efa(0xefa3, rate400, "")}, at{9, efa(0xefa3, rate400, "")}, at{10, gpu(0x2901)}))
	}
	m.pcieSwitch(0xc3, 0xc7, 1, densePorts(0xc3, 2,
		at{0, mlx5("ibp198s0f0", "400 Gb/sec (4X NDR)")}, at{1, mlx5("ibp199s0f0", "400 Gb/sec (4X NDR)")}))
	m.eni(addr(0x56, 0), addr(0x47, 0))
	m.Seen("16 EFAs named rdmap86s0 to rdmap192s0 and two ConnectX-7 RDMA devices ibp198s0f0 and ibp199s0f0 (mlx5, NVLink management, not EFA); ENA netdev enp71s0: public p6-b300 setup notes read through code search")
	m.Src("EFA buses 56, 57, 65, 66, 74, 75, 83, 84, 92, 93, a1, a2, b0, b1, bf, c0, each sharing a PCIe switch with a GPU: the p6-b300 NIC table of the aws-ofi-nccl topology unit test")
	m.Seen("roots pci0000:4b + 0xf*k (4b, 5a, ..., b4), each with 2 EFAs and 1 GPU, the first four on NUMA node 0 and the rest on 1; EFA generation efa3 (dra.net pciSubsystem): Karpenter v1.15.2's tables of what dra.net and NVIDIA's driver published on a real p6-b300.48xlarge")
	m.Inf("8 B300 GPUs carrying B200's 10de:2901, since no public B300 device ID was found; EFA 1d0f:efa3 at %q", rate400)
	m.Inf("switch structure: each GPU root with 11 downstream ports leading to root+3..root+0xd, EFAs at ports 8-9 and the GPU at port 10 (bus root+0xd), the other ports empty; the ENA behind root pci0000:44 (47:00.0), the mlx5 functions behind root pci0000:c3 (c6:00.0, c7:00.0)")
	m.Inf("mlx5 as on p6-b200 (15b3:1021, InfiniBand, 400 Gb/s)")
	m.Inf("the ENA on NUMA node 0; 192 vCPUs: node 0 0-47,96-143, node 1 48-95,144-191, distance 21")
	m.Inf("no local NVMe disks modelled; no NVSwitch PCI functions; p2p file \"NVIDIA\" on every EFA")
	return m.finish()
}

// p6egb200: a Grace-Blackwell (arm64) node: two Grace CPUs, four GPUs. Each
// GPU shares a switch with two EFAs; two more EFAs per GPU sit on a root of
// their own, reached through the CPU.
func p6egb200() *machine {
	m := newMachine("p6e-gb200.36xlarge", 13, 40, "0-143", "0-71", "72-143")
	m.p2p = "NVIDIA"
	// Bus 0 of a Nitro arm64 instance: no emulated Intel host bridge.
	m.fn(roleNone, "0000:00:00.0", "", 0, amazon, 0x0200, classHostBridge, 0, "")
	m.fn(roleNVMe, "0000:00:04.0", "", 0, amazon, 0x8061, classNVMe, 0, "nvme")
	m.flatRoot(0x00, 0, at{0x05, ena("")})
	for k, b := range []int{0x27, 0x3d, 0x9a, 0xb0} {
		node := k / 2
		m.pcieSwitch(b-3, b+2, node, sparsePorts(b-3,
			at{b, efa(0xefa3, rate400, "")}, at{b + 1, efa(0xefa3, rate400, "")}, at{b + 2, gpu(0x2901)}))
		c := b + 0xf
		m.pcieSwitch(c-3, c+1, node, sparsePorts(c-3,
			at{c, efa(0xefa3, rate400, "")}, at{c + 1, efa(0xefa3, rate400, "")}))
	}
	m.eni(addr(0x27, 0), addr(0x00, 0x05))
	m.Src("16 EFAs: GPU-local rdmap39s0, rdmap40s0, rdmap61s0, rdmap62s0, rdmap154s0, rdmap155s0, rdmap176s0, rdmap177s0 (buses 27, 28, 3d, 3e, 9a, 9b, b0, b1) sharing PCIe bridges with a GPU, and CPU-mediated rdmap54s0, rdmap55s0, rdmap76s0, rdmap77s0, rdmap169s0, rdmap170s0, rdmap191s0, rdmap192s0 (36, 37, 4c, 4d, a9, aa, bf, c0) sharing none: the p6e-gb200 NIC table of the aws-ofi-nccl topology unit test")
	m.Inf("4 Blackwell GPUs, carrying B200's 10de:2901 since no public GB200 device ID was found, at buses 29, 3f, 9c, b2, each behind the switch of its two GPU-local EFAs; the two CPU-mediated EFAs 0xf buses above them behind a root of their own")
	m.Inf("switch structure: root pci0000:<first EFA bus - 3>, one downstream port per endpoint numbered by its bus; all in PCI domain 0000 (as the unit test's NIC table gives it)")
	m.Inf("two Grace sockets of 72 cores, one NUMA node each: node 0 0-71, node 1 72-143, distance 40; GPUs and EFAs below bus 0x80 on node 0, the rest node 1; no GPU-memory NUMA nodes modelled")
	m.Inf("bus 0: Amazon host bridge 1d0f:0200, EBS NVMe 1d0f:8061 at 00:04.0, the only ENA at 00:05.0 (enp0s5), one interface with EFA rdmap39s0")
	m.Inf("EFA generation 1d0f:efa3 at %q; p2p file \"NVIDIA\" on every EFA", rate400)
	return m.finish()
}

// trainium1 lays out trn1 and trn1n: no switches; four root buses, each
// with the given EFA slots and Trainium at 1b.0-1e.0. The first EFA of
// root 10 is one interface with the ENA at 10:01.0.
func trainium1(product string, seed int, efaSlots ...int) *machine {
	m := newMachine(product, seed, 21, "0-127", "0-31,64-95", "32-63,96-127")
	m.p2p = "NEURON"
	m.legacyBus(0)
	m.flatRoot(0x10, 0, at{0x01, ena("")})
	for _, r := range []struct{ bus, node int }{{0x10, 0}, {0x20, 0}, {0x90, 1}, {0xa0, 1}} {
		var devs []at
		for _, slot := range efaSlots {
			devs = append(devs, at{slot, efa(0xefa1, rate100, "")})
		}
		for slot := 0x1b; slot <= 0x1e; slot++ {
			devs = append(devs, at{slot, neuron(0x7164)})
		}
		m.flatRoot(r.bus, r.node, devs...)
	}
	m.eni(addr(0x10, efaSlots[0]), addr(0x10, 0x01))
	m.addNeurons(2, "NDv2", "Trn1", "Trainium1", torus4x4)
	m.Inf("Neuron PCI class 0x088000")
	m.Inf("128 vCPUs: node 0 0-31,64-95, node 1 32-63,96-127, distance 21")
	m.Inf("p2p file \"NEURON\" on every EFA")
	return m
}

// trn1: each of four root buses holds 2 EFAs and 4 Trainium.
func trn1() *machine {
	m := trainium1("trn1.32xlarge", 5, 0x19, 0x1a)
	m.Seen("roots pci0000:10, :20, :90, :a0 with no bridges; on each EFAs 1d0f:efa1 at 19.0 and 1a.0 (rdmap16s25, rdmap16s26, ...), Trainium 1d0f:7164 at 1b.0-1e.0 (driver neuron-driver)")
	m.Seen("EFA rate %q; NUMA: roots 10 and 20 node 0, 90 and a0 node 1", rate100)
	m.Src("neuron0-15 class devices: core_count 2, NDv2/Trn1/Trainium1, connected_devices the trn1 torus of docs/hardware.md; no link to the PCI function (index -> BDF is the docs/hardware.md table)")
	m.Inf("one ENA at 10:01.0 (netdev enp16s1), one interface with EFA rdmap16s25 (GID = EUI-64 of its MAC); no local NVMe disks")
	return m.finish()
}

// trn1n: trn1's roots and Neuron devices, with four EFAs a root at slots
// 17-1a, one per Neuron device.
func trn1n() *machine {
	m := trainium1("trn1n.32xlarge", 9, 0x17, 0x18, 0x19, 0x1a)
	m.Seen("16 EFAs at slots 17, 18, 19, 1a of roots pci0000:10, :20, :90, :a0; Neuron devices as on trn1 (1b.0-1e.0)")
	m.Src("neuron0-15 class devices as on trn1")
	m.Inf("EFA 1d0f:efa1 at %q and NUMA as on trn1: roots 10 and 20 node 0, 90 and a0 node 1", rate100)
	m.Inf("one ENA at 10:01.0, one interface with EFA rdmap16s23 (GID = EUI-64 of its MAC)")
	return m.finish()
}

// trn2EFABuses are the first EFA bus of each trn2 switch: EFAs at b and
// b+1, Trainium2 at b+2 and b+3 (docs/hardware.md trn2 tables).
var trn2EFABuses = []int{0x56, 0x6c, 0x82, 0x98, 0xb3, 0xc9, 0xdf, 0xf5}

// trn2: eight switches, each 2 EFAs and 2 Trainium2.
func trn2() *machine {
	m := newMachine("trn2.48xlarge", 6, 21, cpus192, cpus192Node0, cpus192Node1)
	m.p2p = "NEURON"
	m.legacyBus(0)
	var roots []string
	for k, b := range trn2EFABuses {
		root := b - 0x12
		roots = append(roots, fmt.Sprintf("%02x", root))
		devs := []at{
			{b, efa(0xefa3, rate200, "")}, {b + 1, efa(0xefa3, rate200, "")},
			{b + 2, neuron(0x7364)}, {b + 3, neuron(0x7364)},
		}
		if k == 0 {
			devs = append(devs, at{root + 3, ena("")})
		}
		m.pcieSwitch(root, b+3, k/4, sparsePorts(root, devs...))
	}
	m.eni(addr(0x56, 0), addr(0x47, 0))
	m.addNeurons(8, "NDv3", "Trn2", "Trainium2", torus4x4)
	m.Seen("16 Trainium2 1d0f:7364 at the buses of the docs/hardware.md table (0 cc, 1 b5, 2 b6, 3 cb, 4 6f, 5 58, 6 59, 7 6e, 8 9b, 9 84, 10 85, 11 9a, 12 f8, 13 e1, 14 e2, 15 f7), all :00.0")
	m.Seen("16 EFAs at the buses of the Neuron -> EFA table (56, 57, 6c, 6d, 82, 83, 98, 99, b3, b4, c9, ca, df, e0, f5, f6), names rdmap<decimal bus>s0; 8 switches x (2 EFA + 2 Neuron)")
	m.Seen("NUMA: buses 56-9b node 0, b3-f8 node 1")
	m.Src("neuron0-15 class devices: core_count 8, NDv3/Trn2/Trainium2, no link to the PCI function")
	m.Inf("switch structure: each switch's EFAs at buses b, b+1 and Trainium2 at b+2, b+3 under root pci0000:<b-0x12> (roots %s), so the switches sit 0x16 buses apart and the first root is 0x44 as on p5/p5en", strings.Join(roots, ", "))
	m.Inf("one downstream port per endpoint, numbered by the bus it leads to (46:10.0 -> bus 56); no empty ports")
	m.Inf("EFA generation 1d0f:efa3, rate %q", rate200)
	m.Inf("connected_devices: the trn1 4x4 torus")
	m.Inf("Neuron PCI class 0x088000")
	m.Inf("one ENA at 47:00.0 (enp71s0) behind the first switch, one interface with EFA rdmap86s0 (GID = EUI-64 of its MAC); no local NVMe disks")
	m.Inf("192 vCPUs: node 0 0-47,96-143, node 1 48-95,144-191, distance 21")
	m.Inf("p2p file \"NEURON\" on every EFA")
	return m.finish()
}

// family are the models built on demand, not bundled: the other sizes of
// a family whose layout a bundled fixture or a public topology file gives.
var family = []fixture{
	{"g5.12xlarge", func() *machine { return g5size("g5.12xlarge", 14, "0-47", 4) }},
	{"g5.16xlarge", func() *machine { return g5size("g5.16xlarge", 15, "0-63", 1) }},
	{"g5.24xlarge", func() *machine { return g5size("g5.24xlarge", 16, "0-95", 4) }},
	{"g5.48xlarge", g5x48},
}

// g5: one GPU and one EFA flat on root bus 0, no NUMA.
func g5() *machine {
	m := newMachine("g5.8xlarge", 7, 10, "0-31", "0-31")
	m.legacyBus(-1)
	m.flatRoot(0x00, -1,
		at{0x05, ena("ens5")},
		at{0x06, efa(0xefa0, rate100, "efa_0")},
		at{0x1e, gpu(0x2237)},
		at{0x1f, nvme()})
	m.eni(addr(0x00, 0x06), addr(0x00, 0x05))
	m.Seen("the unrenamed IB device name efa_0 (no rdma-core udev rename) occurs in the wild")
	m.Seen("EFA generation 1d0f:efa0 (dra.net pciSubsystem efa0), pcieRoot pci0000:00 for the EFA and the GPU, no NUMA node: Karpenter v1.15.2's table of what dra.net published on a real g5.8xlarge")
	m.Inf("the whole layout: a flat root pci0000:00 with ENA 00:05.0 (ens5), EFA 00:06.0, A10G 10de:2237 at 00:1e.0, local NVMe 1d0f:cd01 at 00:1f.0")
	m.Inf("rate %q; the ENA and the EFA are one EFA interface (GID = EUI-64 of the ENA's MAC)", rate100)
	m.Inf("numa_node -1 on every PCI function, as on single-socket VMs; one NUMA node 0-31, local_cpulist 0-31")
	m.Inf("no p2p file (in-tree efa driver)")
	return m.finish()
}

// g5size is a g5 size with gpus A10Gs: g5.8xlarge's layout with the GPUs
// at 00:1e.0 and the slots below it.
func g5size(product string, seed int, cpus string, gpus int) *machine {
	m := newMachine(product, seed, 10, cpus, cpus)
	m.legacyBus(-1)
	devs := []at{{0x05, ena("ens5")}, {0x06, efa(0xefa0, rate100, "")}, {0x1f, nvme()}}
	for i := range gpus {
		devs = append(devs, at{0x1e - i, gpu(0x2237)})
	}
	m.flatRoot(0x00, -1, devs...)
	m.eni(addr(0x00, 0x06), addr(0x00, 0x05))
	m.Src("%d A10G GPUs and %s vCPUs: the EC2 G5 instance page", gpus, cpus)
	m.Inf("g5.8xlarge's layout: a flat root pci0000:00 with ENA 00:05.0, EFA 1d0f:efa0 00:06.0, the GPUs from 00:1e.0 down, NVMe at 00:1f.0; no NUMA node")
	return m.finish()
}

// g5x48 is g5.48xlarge as aws-ofi-nccl's g5.48xl-topo.xml lays it out.
func g5x48() *machine {
	m := newMachine("g5.48xlarge", 17, 10, "0-191", "0-191")
	m.legacyBus(-1)
	devs := []at{{0x05, ena("ens5")}, {0x15, efa(0xefa0, rate100, "")}, {0x1f, nvme()}}
	for slot := 0x16; slot <= 0x1d; slot++ {
		devs = append(devs, at{slot, gpu(0x2237)})
	}
	m.flatRoot(0x00, -1, devs...)
	m.eni(addr(0x00, 0x15), addr(0x00, 0x05))
	m.Src("a flat root bus 0 with the NIC at 00:15.0 and 8 GPUs at 00:16.0-00:1d.0: aws-ofi-nccl topology/g5.48xl-topo.xml")
	m.Inf("EFA 1d0f:efa0 as on g5.8xlarge; ENA at 00:05.0, NVMe at 00:1f.0; no NUMA node, 192 vCPUs")
	return m.finish()
}

// m5: no EFA, no accelerator.
func m5() *machine {
	m := newMachine("m5.xlarge", 8, 10, "0-3", "0-3")
	m.legacyBus(-1)
	m.flatRoot(0x00, -1, at{0x05, ena("ens5")})
	m.Inf("no EFA, but ib_core and ib_uverbs loaded: class/infiniband and class/infiniband_verbs exist and are empty (without those modules they would be absent)")
	m.Inf("root bus 0: host bridge, VGA 1d0f:1111, EBS NVMe 1d0f:8061 at 00:04.0, ENA at 00:05.0 (ens5)")
	m.Inf("numa_node -1 on every PCI function; one NUMA node 0-3")
	return m.finish()
}
