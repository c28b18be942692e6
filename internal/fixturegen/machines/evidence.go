package machines

// evidence is the README's table of where each fixture fact comes from.
// Only what was read is cited; "docs/hardware.md inference" marks the rest.
const evidence = `## Evidence

Where each fixture fact comes from. "aws-ofi-nccl topology/" is the directory of
github.com/aws/aws-ofi-nccl; "aws-ofi-nccl NIC tables" is a unit test of the NCCL plugin's
topology code (Amazon copyright 2026, with hwloc fixtures of p4d, p5en, p6-b200, p6-b300 and
p6e-gb200) read through code search, whose repository path was not identified. The pairing
facts are checked by topology/nccl_test.go.

| fixture | fact | source |
|---|---|---|
| p4d, p4de | GPUs XX:1c.0, XX:1d.0 with EFA XX:1b.0 on roots 10, 20 (NUMA 0), 90, a0 (NUMA 1); CPU affinity 0-23,48-71 / 24-47,72-95 | aws-ofi-nccl topology/p4d-24xl-topo.xml, p4de-24xl-topo.xml |
| p4d | EFAs meet GPUs at the host bridge, not a switch | aws-ofi-nccl NIC tables |
| p4d | EFA names, efa0, zero node_guid, NVSwitch 80:1a.0 | docs/hardware.md [seen] (source not re-read) |
| p4de | A100 80GB 10de:20b2 | aws-ofi-nccl topology/p4de-24xl-topo.xml |
| p5 | 44:00.0 [45-54] -> 45:00.0 [46-54] -> 46:01.0 [4f-4f] -> EFA 4f:00.0 rdmap79s0 efa1; 46:01.4 [53-53] -> H100 53:00.0; NUMA distance 32; 2 sockets x 48 cores | lstopo -v and numactl in Hugging Face, The Smol Training Playbook, chapter "Infrastructure" |
| p5 | 4 NICs behind each switch (upstream 45, 56, 67, 78 on NUMA 0; 89, 9a, ab, bc on NUMA 1), NICs 4f-52 ... c6-c9 | aws-ofi-nccl topology/p5.48xl-topo.xml (commit 8807ce1e, removed June 2025) |
| p5 | GPU buses 53, 64, ..., ca | docs/hardware.md [seen]; 53 and 64 also in public benchmark notes (code search) |
| p5 | 14 ports a switch, ports 1-7 empty, NVMe at root+0x10, NVSwitches on e0 | docs/hardware.md inference |
| p5, p5e, p5en, p6-b200, p6-b300, g5 | the pcieRoot, numaNode and pciSubsystem of every EFA and the pcieRoot of every GPU | Karpenter v1.15.2, pkg/providers/drametadata: what dra.net and NVIDIA's DRA driver published on real nodes (docs/karpenter.md) |
| p5e | four NUMA nodes (roots 66, 77 node 0; 44, 55 node 1; aa, bb node 2; 88, 99 node 3) | Karpenter v1.15.2 drametadata |
| p5e | the rest (p5 with H200 10de:2335), the CPU lists of the four nodes and their distances | docs/hardware.md inference |
| p5en | H200 at 59, 5a, 72, 73, 8b, 8c, a4, a5; EFA names; efa2 (61346); NUMA 0-47,96-143 / 48-95,144-191, distance 21 | public p5en capture (nvidia-smi, lscpu, numactl, ibv_devinfo) read through code search |
| p5en | EFAs 55-58, 6e-71, 87-8a, a0-a3 each share a switch with a GPU | aws-ofi-nccl NIC tables |
| p5en | switch ports 46:00.0-46:02.5, ENA/EFA/GPU/NVMe buses of the first switch | docs/hardware.md [seen] (source not re-read) |
| p5en | roots 44, 5d, 76, 8f and their NUMA nodes | Karpenter v1.15.2 drametadata |
| p5en | rate 200 Gb/s; ENA pairing | docs/hardware.md inference |
| p6-b200 | EFAs 4f, 50, 60, 61, 71, 72, 84, 85 (rdmap79s0 ... rdmap133s0), each sharing a switch with a GPU | aws-ofi-nccl NIC tables |
| p6-b200 | mlx5 ibp115s0f0, ibp116s0f0; 400 Gb/s | docs/hardware.md [seen] |
| p6-b200 | roots 44, 55, 66, 79 with 2 EFAs and 2 GPUs each, NUMA 0, 0, 1, 1 | Karpenter v1.15.2 drametadata |
| p6-b200 | switch ports, GPU and NVMe buses | docs/hardware.md inference |
| p6-b300 | 16 EFAs rdmap86s0 ... rdmap192s0, mlx5 ibp198s0f0/ibp199s0f0, ENA enp71s0 | public p6-b300 setup notes read through code search |
| p6-b300 | EFA buses 56, 57, 65, 66, ..., bf, c0, each sharing a switch with a GPU | aws-ofi-nccl NIC tables |
| p6-b300 | roots 4b, 5a, ..., b4 with 2 EFAs and 1 GPU each, NUMA 0 for the first four | Karpenter v1.15.2 drametadata |
| p6-b300 | GPU id (B200's 10de:2901 stands in), switch ports, GPU buses | docs/hardware.md inference |
| p6e-gb200 | 8 GPU-local EFAs (27, 28, 3d, 3e, 9a, 9b, b0, b1) sharing bridges with a GPU, 8 CPU-mediated (36, 37, 4c, 4d, a9, aa, bf, c0) sharing none | aws-ofi-nccl NIC tables |
| p6e-gb200 | GPU id (B200's 10de:2901 stands in), GPU buses, 2 Grace sockets of 72 CPUs, NUMA distance 40, bus 0 | docs/hardware.md inference |
| trn1, trn1n, trn2 | buses, names, Neuron tables, NUMA | docs/hardware.md [seen] (source not re-read) |
| g5.8xlarge | the unrenamed name efa_0 | docs/hardware.md [seen] |
| g5 | EFA 1d0f:efa0 on root pci0000:00 with the GPUs, no NUMA node | Karpenter v1.15.2 drametadata |
| g5.8xlarge | the layout (aws-ofi-nccl g5.48xl-topo.xml shows a flat root bus 0 with GPUs at 00:16-00:1d and the NIC at 00:15.0 on g5.48xlarge, which has no fixture) | docs/hardware.md inference |
| every EFA | class/infiniband/<name>/device and infiniband_verbs/<uverbsN>/device are "../../../<address>" | the kernel's kernfs_get_target_path (a link to an ancestor climbs above it) |
`
