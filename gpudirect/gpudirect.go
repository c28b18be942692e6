// Package gpudirect judges, from sysfs and the NVIDIA driver's proc files,
// whether each GPU and its closest EFAs can use GPUDirect RDMA (the EFA
// reading and writing GPU memory without a copy through host memory), and
// what blocks a pair that cannot.
//
// An EFA reaches GPU memory by one of two paths, and user space picks
// which (libfabric, aws-ofi-nccl and their settings):
//
//   - dma-buf: the GPU driver exports the memory as a dma-buf, which the
//     efa driver imports (kernel 5.12 and later). Grace-Blackwell
//     (coherent) platforms need it, and there the NVIDIA driver checks the
//     PCIe topology of the pair before it lets the EFA attach.
//   - peer-memory: the out-of-tree efa driver pins GPU memory through
//     NVIDIA's nvidia_p2p interface, and says so in its p2p file.
//
// A pair is ready when either path is. Access Control Services on the
// switch ports between the two decide only how fast, not whether.
package gpudirect

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// Status is a path's or a pair's readiness. From best to worst: Ready,
// Slow, Unknown, Blocked. The zero Status is Unknown: nothing judged is
// never ready.
type Status int

// The statuses.
const (
	// Unknown: a fact the judgement needs was not available, or nothing
	// was judged.
	Unknown Status = iota
	Ready
	// Slow: ready, but ACS sends the pair's traffic up to the root
	// complex.
	Slow
	// Blocked: a fact keeps the path from working.
	Blocked
)

var statusNames = [...]string{"unknown", "ready", "slow", "blocked"}

// statusRank orders the statuses from best to worst.
var statusRank = [...]int{Unknown: 2, Ready: 0, Slow: 1, Blocked: 3}

func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return statusNames[s]
}

// Usable reports a pair or path that GPUDirect RDMA works on: Ready, or
// Slow (it works, through the root complex).
func (s Status) Usable() bool { return s == Ready || s == Slow }

// worse is the worse of two statuses; a status out of range is worst.
func worse(a, b Status) Status {
	rank := func(s Status) int {
		if s < 0 || int(s) >= len(statusRank) {
			return len(statusRank)
		}
		return statusRank[s]
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// better is the better of two statuses.
func better(a, b Status) Status {
	if worse(a, b) == a {
		return b
	}
	return a
}

// MarshalText prints String.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Method is a path from the EFA to GPU memory.
type Method string

// The paths.
const (
	DMABuf     Method = "dma-buf"
	PeerMemory Method = "peer-memory"
)

// The checks a Finding comes from.
const (
	CheckNVIDIADriver   = "nvidia-driver"
	CheckKernelDMABuf   = "kernel-dma-buf"
	CheckNVIDIATopology = "nvidia-topology-check"
	CheckEFAPeerMemory  = "efa-peer-memory"
	CheckACS            = "acs"
	// CheckNCCL is what NCCL does with the pair by default: GPUDirect RDMA
	// up to PXB, or farther where aws-ofi-nccl's topology file for the
	// instance type declares the switch the two share.
	CheckNCCL = "nccl-gdr-level"
)

// ncclTopologyFiles are the instance types whose GPU-EFA pairs a guest
// sees at PHB, for which aws-ofi-nccl ships a topology file that declares
// the PCIe switch each GPU shares with its EFA (topology/*-topo.xml).
var ncclTopologyFiles = map[string]string{
	"p4d.24xlarge":  "p4d-24xl-topo.xml",
	"p4de.24xlarge": "p4de-24xl-topo.xml",
	"g5.48xlarge":   "g5.48xl-topo.xml",
}

// Sources of the rules, as the findings cite them.
const (
	sourceNVIDIATopology = "NVIDIA open-gpu-kernel-modules kernel-open/nvidia/nv-pci.c (nv_pci_is_valid_topology_for_direct_pci) and nv-dmabuf.c; NVIDIA driver 595.91.07 release notes; NVIDIA/aicr#2383 and #2439"
	sourceDMABuf         = "aws-ofi-nccl pull requests 848 and 861 (dma-buf needs kernel 5.12; GB200 needs dma-buf); kernel drivers/infiniband/core/umem_dmabuf.c (5.12)"
	sourceEFAP2P         = "amzn-drivers kernel/linux/efa/src/efa_sysfs.c, efa_p2p.c and efa_nvmem_impl.h"
	sourceACS            = "PCI Express Base Specification, ACS extended capability; NCCL troubleshooting guide, PCI Access Control Services"
	sourceNVIDIADriver   = "NVIDIA open-gpu-kernel-modules kernel-open/nvidia/nv.c (MODULE_VERSION)"
	sourceNCCL           = "NVIDIA/nccl src/graph/paths.cc (ncclTopoCheckGdr: netGdrLevel PATH_PXB unless NCCL_NET_GDR_LEVEL); aws-ofi-nccl src/platform-aws.c and topology/*-topo.xml (applied while NCCL_TOPO_FILE is unset)"
)

// Finding is what one check found.
type Finding struct {
	Check   string `json:"check"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Source  string `json:"source"`
}

// Path is one method's judgement: its status is the worst of its
// findings.
type Path struct {
	Method   Method    `json:"method"`
	Status   Status    `json:"status"`
	Findings []Finding `json:"findings"`
}

// Pair is a GPU and one of its closest EFAs.
type Pair struct {
	GPU  *topology.Device `json:"-"`
	EFA  *topology.Device `json:"-"`
	Link topology.Link    `json:"link"`
	// Status is the best path's status, Slow instead of Ready when ACS
	// redirects the pair's traffic.
	Status Status `json:"status"`
	// Paths are dma-buf, then peer-memory.
	Paths []Path `json:"paths"`
	// ACS is what the switch ports between the two do with peer-to-peer
	// traffic; nil for a pair on different root complexes, where it
	// crosses the host anyway.
	ACS *Finding `json:"acs,omitempty"`
	// NCCL is whether NCCL uses GPUDirect RDMA for the pair with its
	// defaults (CheckNCCL): Ready up to PXB, or where aws-ofi-nccl's
	// topology file for the instance type applies (the message names
	// it); Slow beyond, where NCCL stages GPU memory through the host
	// unless NCCL_NET_GDR_LEVEL allows the pair. A process's own
	// environment can change both: efakit doctor in the pod reads it.
	// nil for a link not known, and on a Grace (coherent) platform.
	NCCL *Finding `json:"nccl,omitempty"`
}

// ReadyBy returns the methods whose path is ready.
func (p Pair) ReadyBy() []Method {
	var out []Method
	for _, x := range p.Paths {
		if x.Status == Ready {
			out = append(out, x.Method)
		}
	}
	return out
}

// Reasons returns the findings that keep the pair's paths from ready,
// each prefixed with its method: for a pair that is not ready, what to fix.
func (p Pair) Reasons() []string {
	var out []string
	for _, x := range p.Paths {
		for _, f := range x.Findings {
			if f.Status != Ready {
				out = append(out, fmt.Sprintf("%s: %s", x.Method, f.Message))
			}
		}
	}
	return out
}

// Assess judges each GPU of t with its closest EFAs (Topology.Closest),
// in the GPUs' order, without ACS (Judge and JudgePair add it), from what
// the scan read: the devices' IOMMU groups and the EFAs' gdr files among
// it. It writes nothing into t, so several goroutines may judge one
// topology.
func Assess(t *topology.Topology, n Node) []Pair {
	var pairs []Pair
	for _, g := range t.Of(topology.KindGPU) {
		if g.PCI == nil {
			continue
		}
		for _, e := range t.Closest(g) {
			if p, ok := assessPair(t, g, e, n); ok {
				pairs = append(pairs, p)
			}
		}
	}
	return pairs
}

// errNotAPair is a device that is not an EFA with its PCI function.
var errNotAPair = errors.New("not a GPU and an EFA of the topology")

// assessPair judges g with the EFA e; false when e is not an EFA with its
// PCI function.
func assessPair(t *topology.Topology, g, e *topology.Device, n Node) (Pair, bool) {
	if e == nil || e.Kind != topology.KindEFA || e.PCI == nil || e.EFA == nil {
		return Pair{}, false
	}
	return judge(t, g, e, n), true
}

// JudgePair is the whole judgement of one GPU and one EFA of t, any two,
// not only a GPU's closest: the node's facts (proc may be nil), the
// pair's paths, and the ACS of the switch ports between them. It fails
// when gpu is not a GPU of t or efa not an EFA, with their PCI functions.
func JudgePair(fsys fs.FS, t *topology.Topology, gpu, efa *topology.Device, proc fs.FS) (Pair, error) {
	if t == nil || gpu == nil || gpu.Kind != topology.KindGPU || gpu.PCI == nil || t.Lookup(gpu.PCI.Address) != gpu ||
		efa == nil || efa.PCI == nil || t.Lookup(efa.PCI.Address) != efa {
		return Pair{}, fmt.Errorf("gpudirect: %w", errNotAPair)
	}
	r := sysread.New(fsys)
	n, nerr := ReadNode(r, proc)
	p, ok := assessPair(t, gpu, efa, n)
	if !ok {
		return Pair{}, fmt.Errorf("gpudirect: %w", errNotAPair)
	}
	pairs := []Pair{p}
	aerr := readACS(r, pairs)
	return pairs[0], errors.Join(nerr, aerr)
}

// readACS adds to each pair what the switch ports between its GPU and EFA
// do with peer-to-peer traffic, from their config space, and makes a ready
// pair Slow where they redirect it. Each port is read once. Config space
// is read from the device (a hypervisor trap a word in a virtual machine),
// so the plugin's periodic scans leave it to efakit topo and doctor. A
// config file an unprivileged reader cannot see, or one absent from a
// capture, leaves ACS unknown without an error.
func readACS(r *sysread.Reader, pairs []Pair) error {
	var errs []error
	cache := map[*pcie.Device]acsRead{}
	for i := range pairs {
		p := &pairs[i]
		f, aerrs := acsFinding(r, cache, p.GPU.PCI, p.EFA.PCI)
		errs = append(errs, aerrs...)
		p.ACS = f
		if p.Status == Ready && f != nil && f.Status == Slow {
			p.Status = Slow
		}
	}
	return errors.Join(errs...)
}

// judge is the pair's paths, without ACS.
func judge(t *topology.Topology, g, e *topology.Device, n Node) Pair {
	p := Pair{GPU: g, EFA: e, Link: t.Link(g, e)}
	driver := nvidiaDriver(g.PCI, n)
	grace := coherent(t, g)

	dmabuf := []Finding{driver, kernelDMABuf(n)}
	if grace {
		dmabuf = append(dmabuf, nvidiaTopology(g.PCI, e.PCI, n))
	}
	peer := []Finding{driver, efaPeerMemory(e.EFA, n)}
	if grace {
		peer = append(peer, Finding{Check: CheckEFAPeerMemory, Status: Blocked, Source: sourceDMABuf,
			Message: "a Grace (coherent) platform needs dma-buf for GPUDirect: aws-ofi-nccl does not use peer memory there"})
	}
	p.Paths = []Path{path(DMABuf, dmabuf), path(PeerMemory, peer)}
	p.Status = better(p.Paths[0].Status, p.Paths[1].Status)
	if !grace {
		// A Grace GPU reaches its EFA through NVLink-C2C, a path NCCL
		// judges apart from PCIe's: not judged here.
		p.NCCL = ncclFinding(t, p.Link)
	}
	if p.Status == Ready && p.NCCL != nil && p.NCCL.Status == Slow {
		p.Status = Slow
	}
	return p
}

// ncclFinding is what NCCL does with a pair of this link by default; nil
// for a link not known.
func ncclFinding(t *topology.Topology, l topology.Link) *Finding {
	f := &Finding{Check: CheckNCCL, Status: Ready, Source: sourceNCCL}
	switch {
	case l == topology.LinkUnknown:
		return nil
	case l <= topology.LinkPXB:
		f.Message = fmt.Sprintf("%s: within NCCL's default GPUDirect RDMA level (PXB)", l)
		return f
	}
	instance := ""
	if t.Host != nil {
		instance = t.Host.InstanceType
	}
	if file, ok := ncclTopologyFiles[instance]; ok {
		f.Message = fmt.Sprintf("%s, beyond NCCL's default GPUDirect RDMA level (PXB), but aws-ofi-nccl's topology file for %s (%s) declares the PCIe switch the GPU shares with the EFA: NCCL uses GPUDirect RDMA while NCCL_TOPO_FILE is unset", l, instance, file)
		return f
	}
	f.Status = Slow
	f.Message = fmt.Sprintf("%s: beyond NCCL's default GPUDirect RDMA level (PXB), NCCL stages the GPU's memory through the host unless NCCL_NET_GDR_LEVEL is %s or farther", l, gdrLevelFor(l))
	return f
}

// gdrLevelFor is the NCCL_NET_GDR_LEVEL that allows a link.
func gdrLevelFor(l topology.Link) string {
	if l == topology.LinkPHB {
		return "PHB"
	}
	return "SYS"
}

func path(m Method, found []Finding) Path {
	x := Path{Method: m, Findings: found, Status: Ready}
	for _, f := range found {
		x.Status = worse(x.Status, f.Status)
	}
	return x
}

// coherent reports a GPU joined to its CPU by NVLink-C2C (Grace
// Blackwell), where the NVIDIA driver checks the PCIe topology of a
// dma-buf importer: an instance of the p6e family, or the HGX GB200's
// device ID (10de:2941, pci.ids).
func coherent(t *topology.Topology, g *topology.Device) bool {
	if t.Host != nil && strings.HasPrefix(t.Host.InstanceType, "p6e-") {
		return true
	}
	return g.PCI != nil && g.PCI.Vendor == 0x10de && g.PCI.Device == 0x2941
}

// nvidiaDriver checks that the nvidia driver holds the GPU.
func nvidiaDriver(g *pcie.Device, n Node) Finding {
	f := Finding{Check: CheckNVIDIADriver, Status: Ready, Source: sourceNVIDIADriver}
	switch g.Driver {
	case "nvidia":
		v := n.NVIDIAVersion
		if v == "" {
			v = "version unknown: no " + sysattr.NVIDIADriverVersion
		}
		f.Message = fmt.Sprintf("GPU %s bound to nvidia (%s)", g.Address, v)
	case "":
		f.Status = Blocked
		f.Message = fmt.Sprintf("GPU %s is bound to no driver: load the nvidia module", g.Address)
	default:
		f.Status = Blocked
		f.Message = fmt.Sprintf("GPU %s is bound to %s, not nvidia", g.Address, g.Driver)
	}
	return f
}

// kernelDMABuf checks the kernel can import a dma-buf into an RDMA memory
// region (ib_umem_dmabuf, Linux 5.12).
func kernelDMABuf(n Node) Finding {
	f := Finding{Check: CheckKernelDMABuf, Status: Ready, Source: sourceDMABuf}
	major, minor, ok := kernelVersion(n.KernelRelease)
	switch {
	case !ok:
		f.Status = Unknown
		f.Message = "kernel release not read (proc " + kernelReleaseFile + ")"
	case major < 5 || major == 5 && minor < 12:
		f.Status = Blocked
		f.Message = fmt.Sprintf("kernel %s cannot import a dma-buf into an RDMA memory region: that needs 5.12", n.KernelRelease)
	default:
		f.Message = fmt.Sprintf("kernel %s imports dma-bufs (5.12 and later)", n.KernelRelease)
	}
	return f
}

// efaPeerMemory checks that the efa driver found NVIDIA's peer-memory
// interface: its p2p file names the first provider it found.
func efaPeerMemory(e *efa.Device, n Node) Finding {
	f := Finding{Check: CheckEFAPeerMemory, Status: Ready, Source: sourceEFAP2P}
	switch {
	case strings.HasPrefix(e.P2P, "NVIDIA"):
		f.Message = fmt.Sprintf("the efa driver's peer-memory provider is %q", e.P2P)
	case e.GDR != nil && *e.GDR:
		f.Message = "the efa driver found NVIDIA's peer-memory symbols (gdr: 1)"
	case e.GDR != nil:
		f.Status = Blocked
		f.Message = "the efa driver found none of NVIDIA's peer-memory symbols (gdr: 0): reload efa with nvidia loaded"
	case n.EFADriverVersion == "" && e.P2P == "":
		f.Status = Blocked
		f.Message = "the in-tree efa driver has no peer-memory path (no " + sysattr.EFADriverVersion + ", no p2p file): install the EFA installer's driver, or use dma-buf"
	default:
		f.Status = Blocked
		f.Message = fmt.Sprintf("the efa driver %s found no NVIDIA peer-memory provider (p2p: %q); it looks for one when it loads: reload efa with nvidia loaded", n.EFADriverVersion, e.P2P)
	}
	return f
}

// nvidiaTopology is the NVIDIA driver's check before an EFA attaches a
// coherent GPU's dma-buf with the PCIe mapping type. Before R595 the GPU
// and the EFA had to share an IOMMU group, or the nvidia module had to be
// loaded with GrdmaPciTopoCheckOverride=1. From R595 the parameter is gone:
// one IOMMU group, or an EFA in none below a bridge it shares with the GPU.
// Two functions without a group count as one group, as the kernel compares
// their (nil) group pointers.
func nvidiaTopology(g, e *pcie.Device, n Node) Finding {
	f := Finding{Check: CheckNVIDIATopology, Status: Ready, Source: sourceNVIDIATopology}
	same := g.IOMMUGroup == e.IOMMUGroup
	where := fmt.Sprintf("GPU %s (%s, %s) and EFA %s (%s, %s)", g.Address, group(g), g.Root, e.Address, group(e), e.Root)
	if same {
		f.Message = where + " share an IOMMU group"
		return f
	}
	branch, ok := driverBranch(n.NVIDIAVersion)
	if !ok {
		f.Status = Unknown
		f.Message = where + ": the rule depends on the NVIDIA driver's branch, and " + sysattr.NVIDIADriverVersion + " was not read"
		return f
	}
	if branch >= 595 {
		if e.IOMMUGroup == pcie.NoIOMMUGroup && sharedBridge(g, e) != nil {
			f.Message = fmt.Sprintf("%s: the EFA is in no IOMMU group and shares bridge %s with the GPU", where, sharedBridge(g, e).Address)
			return f
		}
		f.Status = Blocked
		f.Message = fmt.Sprintf("%s: driver %s (R595 and later) lets an EFA attach only in the GPU's IOMMU group, or in none below a bridge it shares with the GPU; the dma-buf attach fails with \"topology not supported for mapping type FORCE_PCIE\". R595 has no override: use an R580 driver with NVreg_GrdmaPciTopoCheckOverride=1", where, n.NVIDIAVersion)
		return f
	}
	v, known := n.NVIDIAParams[topoCheckOverride]
	switch {
	case n.NVIDIAParams == nil:
		f.Status = Unknown
		f.Message = fmt.Sprintf("%s are in different IOMMU groups: driver %s lets the EFA attach only with %s=1, and proc %s was not read", where, n.NVIDIAVersion, topoCheckOverride, nVIDIAParamsFile)
	case known && v == "1":
		f.Message = fmt.Sprintf("%s are in different IOMMU groups, and driver %s has %s: 1", where, n.NVIDIAVersion, topoCheckOverride)
	case !known || v == "0":
		f.Status = Blocked
		f.Message = fmt.Sprintf("%s are in different IOMMU groups and driver %s lacks %s=1: the dma-buf attach fails with \"topology not supported for mapping type FORCE_PCIE\"; load nvidia with NVreg_%s=1", where, n.NVIDIAVersion, topoCheckOverride, topoCheckOverride)
	default:
		f.Status = Unknown
		f.Message = fmt.Sprintf("%s are in different IOMMU groups, and driver %s has %s: %s, a value whose meaning is not known", where, n.NVIDIAVersion, topoCheckOverride, names.Printable(clip(v)))
	}
	return f
}

func group(d *pcie.Device) string {
	if d.IOMMUGroup == pcie.NoIOMMUGroup {
		return "no IOMMU group"
	}
	return fmt.Sprintf("IOMMU group %d", d.IOMMUGroup)
}

// sharedBridge is the deepest bridge above both, nil when none (different
// root complexes, or both on the root bus).
func sharedBridge(a, b *pcie.Device) *pcie.Device {
	above := map[*pcie.Device]bool{}
	for p := b.Parent; p != nil; p = p.Parent {
		above[p] = true
	}
	for p := a.Parent; p != nil; p = p.Parent {
		if above[p] {
			return p
		}
	}
	return nil
}

// acsRead is one port's ACS, read once per Assess.
type acsRead struct {
	acs *pcie.ACS
	err error
}

// acsFinding checks the ports a peer-to-peer request between a and b
// enters the switch by: the bridges below the deepest one they share. nil
// when they share none.
func acsFinding(r *sysread.Reader, cache map[*pcie.Device]acsRead, a, b *pcie.Device) (*Finding, []error) {
	shared := sharedBridge(a, b)
	if shared == nil {
		return nil, nil
	}
	var ports []*pcie.Device
	for _, d := range []*pcie.Device{a, b} {
		for p := d.Parent; p != nil && p != shared; p = p.Parent {
			ports = append(ports, p)
		}
	}
	f := &Finding{Check: CheckACS, Status: Ready, Source: sourceACS}
	var redirect, unknown []string
	var errs []error
	for _, p := range ports {
		x, ok := cache[p]
		if !ok {
			x.acs, x.err = pcie.ReadACS(r, p)
			cache[p] = x
			if x.err != nil && !errors.Is(x.err, pcie.ErrConfigHidden) && !errors.Is(x.err, fs.ErrNotExist) {
				errs = append(errs, x.err)
			}
		}
		switch {
		case errors.Is(x.err, pcie.ErrConfigHidden):
			unknown = append(unknown, p.Address.String()+" (config space past 64 bytes needs root)")
		case x.err != nil:
			unknown = append(unknown, p.Address.String()+" (config not read)")
		case x.acs != nil && x.acs.Redirects():
			redirect = append(redirect, fmt.Sprintf("%s (%s)", p.Address, x.acs))
		}
	}
	switch {
	case len(redirect) > 0:
		f.Status = Slow
		f.Message = "ACS redirects peer-to-peer traffic to the root complex at " + strings.Join(redirect, ", ")
	case len(unknown) > 0:
		f.Status = Unknown
		f.Message = "ACS unknown at " + strings.Join(unknown, ", ")
	case len(ports) == 0:
		f.Message = fmt.Sprintf("the pair meets at bridge %s, through no other port", shared.Address)
	default:
		f.Message = fmt.Sprintf("no port between them redirects peer-to-peer traffic (%d checked)", len(ports))
	}
	return f, errs
}

// Judge is the whole judgement of a root, reading no file twice: the node's
// facts (ReadNode; proc may be nil), each GPU with its closest EFAs
// (Assess), and the ACS of the switch ports between them.
func Judge(fsys fs.FS, t *topology.Topology, proc fs.FS) ([]Pair, Node, error) {
	r := sysread.New(fsys)
	n, nerr := ReadNode(r, proc)
	pairs := Assess(t, n)
	return pairs, n, errors.Join(nerr, readACS(r, pairs))
}

// Blocker is a finding that keeps pairs from ready, on the first pair it
// applies to.
type Blocker struct {
	Pair *Pair
	// Key is the method and check ("dma-buf nvidia-topology-check"), or
	// the check alone for ACS and NCCL.
	Key     string
	Finding Finding
	// Pairs is how many pairs that are not ready the finding applies to.
	Pairs int
}

// Blockers lists, in the pairs' order, each finding that is not ready on
// a pair that is not ready (ACS and NCCL included), once per method, check and
// status, on the first pair it applies to.
func Blockers(pairs []Pair) []Blocker {
	var out []Blocker
	at := map[string]int{}
	add := func(p *Pair, key string, f Finding) {
		if f.Status == Ready {
			return
		}
		k := key + " " + f.Status.String()
		if i, ok := at[k]; ok {
			out[i].Pairs++
			return
		}
		at[k] = len(out)
		out = append(out, Blocker{Pair: p, Key: key, Finding: f, Pairs: 1})
	}
	for i := range pairs {
		p := &pairs[i]
		if p.Status == Ready {
			continue
		}
		for _, x := range p.Paths {
			for _, f := range x.Findings {
				add(p, string(x.Method)+" "+f.Check, f)
			}
		}
		if p.ACS != nil {
			add(p, p.ACS.Check, *p.ACS)
		}
		if p.NCCL != nil {
			add(p, p.NCCL.Check, *p.NCCL)
		}
	}
	return out
}
