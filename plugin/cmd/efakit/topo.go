package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/pciids"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// topoView is `efakit topo -o json`: the same data as the matrix.
type topoView struct {
	InstanceType string           `json:"instanceType"`
	Devices      []topoDeviceView `json:"devices"`
	// Links[i][j] is the link class between Devices[i] and Devices[j].
	Links     [][]topology.Link `json:"links"`
	NUMANodes []numaView        `json:"numaNodes"`
	Legend    map[string]string `json:"legend"`
	Notes     []string          `json:"notes"`
	// EFADriverVersion is module/efa/version; absent for the in-tree
	// driver or a version unknown.
	EFADriverVersion string `json:"efaDriverVersion,omitempty"`
	// GPUDirect is each GPU with its closest EFAs: whether GPUDirect RDMA
	// can work between them, and what blocks it.
	GPUDirect []gpuDirectView `json:"gpuDirect"`
}

// gpuDirectView is one GPU-EFA pair's readiness.
type gpuDirectView struct {
	GPU        string `json:"gpu"`
	GPUAddress string `json:"gpuAddress"`
	EFA        string `json:"efa"`
	EFAAddress string `json:"efaAddress"`
	gpudirect.Pair
}

func newGPUDirectViews(pairs []gpudirect.Pair) []gpuDirectView {
	out := []gpuDirectView{}
	for _, p := range pairs {
		out = append(out, gpuDirectView{GPU: p.GPU.Name, GPUAddress: p.GPU.PCI.Address.String(), EFA: p.EFA.Name, EFAAddress: p.EFA.PCI.Address.String(), Pair: p})
	}
	return out
}

type topoDeviceView struct {
	Label        string             `json:"label"` // the matrix's column name
	Name         string             `json:"name"`
	Kind         topology.Kind      `json:"kind"`
	PCIAddress   *string            `json:"pciAddress"`
	PCIDevice    string             `json:"pciDevice,omitempty"`
	NeuronIndex  *int               `json:"neuronIndex,omitempty"`
	LocalCPUs    string             `json:"localCPUs,omitempty"`
	Standard     *topology.Standard `json:"standardAttributes"`
	Closest      []string           `json:"closest"`
	DeviceGroups *neuron.Groups     `json:"deviceGroups"`
	// PCIeLink, IOMMUGroup and an EFA's GDR are read for the JSON only.
	PCIeLink   *linkView `json:"pcieLink,omitempty"`
	IOMMUGroup *int      `json:"iommuGroup,omitempty"`
	GDR        *bool     `json:"gdr,omitempty"`
}

type numaView struct {
	ID        int    `json:"id"`
	CPUs      string `json:"cpus"`
	Distances []int  `json:"distances"`
	Socket    *int   `json:"socket"`
}

// labels gives each device its short column name: GPU0, NRN0, NIC0.
func labels(t *topology.Topology) map[*topology.Device]string {
	out := map[*topology.Device]string{}
	nics := 0
	for _, d := range t.Devices {
		switch d.Kind {
		case topology.KindGPU:
			out[d] = d.Name
		case topology.KindNeuron:
			out[d] = strings.Replace(d.Name, "NEURON", "NRN", 1)
		default:
			out[d] = fmt.Sprintf("NIC%d", nics)
			nics++
		}
	}
	return out
}

// newTopoView is the topology's view; with names (the JSON), each
// device's PCI device name too.
func newTopoView(t *topology.Topology, names *pciids.Names) topoView {
	lab := labels(t)
	v := topoView{Legend: map[string]string{}, Notes: t.Notes, Links: [][]topology.Link{}, Devices: []topoDeviceView{}, NUMANodes: []numaView{}}
	if v.Notes == nil {
		v.Notes = []string{}
	}
	if t.Host != nil {
		v.InstanceType = t.Host.InstanceType
		for _, n := range t.Host.NUMANodes {
			nv := numaView{ID: n.ID, CPUs: n.CPUs.String(), Distances: n.Distances}
			if n.Socket >= 0 {
				s := n.Socket
				nv.Socket = &s
			}
			v.NUMANodes = append(v.NUMANodes, nv)
		}
	}
	for _, l := range topology.LinkLegend {
		v.Legend[l.Link] = l.Meaning
	}
	for _, d := range t.Devices {
		dv := topoDeviceView{Label: lab[d], Name: d.Name, Kind: d.Kind, Closest: []string{}, DeviceGroups: d.Groups}
		if d.PCI != nil {
			a := d.PCI.Address.String()
			dv.PCIAddress = &a
			if names != nil {
				dv.PCIDevice = names.Device(d.PCI.Vendor, d.PCI.Device)
			}
			if d.PCI.LocalCPUs != nil {
				dv.LocalCPUs = d.PCI.LocalCPUs.String()
			}
			dv.PCIeLink, dv.IOMMUGroup = newLinkView(d.PCI), iommuGroup(d.PCI)
		}
		if d.EFA != nil {
			dv.GDR = d.EFA.GDR
		}
		if d.NeuronIndex >= 0 {
			i := d.NeuronIndex
			dv.NeuronIndex = &i
		}
		if s, ok := t.StandardAttributes(d); ok {
			dv.Standard = &s
		}
		for _, c := range t.Closest(d) {
			dv.Closest = append(dv.Closest, c.Name)
		}
		row := make([]topology.Link, len(t.Devices))
		for j, o := range t.Devices {
			row[j] = t.Link(d, o)
		}
		v.Links = append(v.Links, row)
		v.Devices = append(v.Devices, dv)
	}
	return v
}

func cmdTopo(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("topo")
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	out := fl.String("o", "matrix", "output `format`: matrix or json")
	proc := fl.String("proc", "", "proc file system `directory` for the GPUDirect checks (the NVIDIA driver's params, the kernel release); default /proc with --sysfs /sys, none otherwise")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	if *out != "matrix" && *out != "json" {
		fmt.Fprintf(stderr, "efakit topo: unknown output format %q (matrix, json)\n", *out)
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit topo: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit topo", r)
	// The PCIe links only for the JSON, which prints them.
	t, scanErr := placed.Scan(r, *out == "json")
	sr := sysread.New(r)
	pairs, node, err := assessGPUDirect(sr, t, *root, *proc)
	scanErr = errors.Join(scanErr, err)
	// Only the JSON prints names (the matrix has none), links, IOMMU
	// groups and the driver's version.
	var names *pciids.Names
	if *out == "json" {
		names = pciids.LoadNames()
	}
	v := newTopoView(t, names)
	if *out == "json" {
		v.EFADriverVersion = node.EFADriverVersion
	}
	v.GPUDirect = newGPUDirectViews(pairs)
	if *out == "json" {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "efakit topo: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printMatrix(stdout, t, v)
	}
	if scanErr != nil {
		printErrors(stderr, "efakit topo", scanErr)
		return 1
	}
	return 0
}

// printMatrix prints the view as nvidia-smi topo -m does: link classes,
// then CPU and NUMA affinity, then legends.
func printMatrix(w io.Writer, t *topology.Topology, v topoView) {
	if v.InstanceType != "" {
		fmt.Fprintf(w, "Instance type: %s\n\n", v.InstanceType)
	}
	if len(v.Devices) == 0 {
		fmt.Fprintln(w, "(no GPU, Neuron device or EFA)")
	}
	groups := false
	for _, d := range v.Devices {
		groups = groups || d.DeviceGroups != nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	if len(v.Devices) > 0 {
		fmt.Fprint(tw, "\t")
		for _, d := range v.Devices {
			fmt.Fprintf(tw, "%s\t", d.Label)
		}
		fmt.Fprint(tw, "CPU Affinity\tNUMA Affinity")
		if groups {
			fmt.Fprint(tw, "\tDevice Group (4)")
		}
		fmt.Fprintln(tw)
	}
	for i, d := range v.Devices {
		fmt.Fprintf(tw, "%s\t", d.Label)
		for _, l := range v.Links[i] {
			s := l.String()
			if l == topology.LinkSelf {
				s = "X"
			}
			fmt.Fprintf(tw, "%s\t", s)
		}
		numa, cpus, group := "N/A", d.LocalCPUs, "-"
		if d.Standard != nil && d.Standard.NUMANode != nil {
			numa = fmt.Sprint(*d.Standard.NUMANode)
		}
		if cpus == "" {
			cpus = "N/A"
		}
		if d.DeviceGroups != nil {
			group = d.DeviceGroups.Group4
		}
		fmt.Fprintf(tw, "%s\t%s", cpus, numa)
		if groups {
			fmt.Fprintf(tw, "\t%s", group)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nLegend:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  X    = Self")
	for _, l := range topology.LinkLegend[1:] {
		fmt.Fprintf(w, "  %-4s = %s\n", l.Link, l.Meaning)
	}
	var nics []string
	for _, d := range v.Devices {
		if d.Kind == topology.KindEFA || d.Kind == topology.KindNeuron {
			addr := "-"
			if d.PCIAddress != nil {
				addr = *d.PCIAddress
			}
			nics = append(nics, fmt.Sprintf("  %-6s: %s (%s), closest: %s", d.Label, d.Name, addr, strings.Join(d.Closest, ", ")))
		}
	}
	if len(nics) > 0 {
		fmt.Fprintln(w, "\nNIC and Neuron Legend:")
		fmt.Fprintln(w)
		for _, s := range nics {
			fmt.Fprintln(w, s)
		}
	}
	if len(v.NUMANodes) > 0 {
		fmt.Fprintln(w, "\nNUMA nodes:")
		fmt.Fprintln(w)
		for _, n := range v.NUMANodes {
			fmt.Fprintf(w, "  node%d: CPUs %s, distances %v\n", n.ID, n.CPUs, n.Distances)
		}
	} else if t.Host != nil {
		fmt.Fprintf(w, "\nNo NUMA nodes in %s\n", "devices/system/node")
	}
	printGPUDirect(w, v)
	for _, n := range v.Notes {
		fmt.Fprintf(w, "\nNote: %s", n)
	}
	if len(v.Notes) > 0 {
		fmt.Fprintln(w)
	}
}

// assessGPUDirect judges each GPU with its closest EFAs (gpudirect.Judge);
// proc is read when given, or when the root is the live /sys.
func assessGPUDirect(r *sysread.Reader, t *topology.Topology, root, proc string) ([]gpudirect.Pair, gpudirect.Node, error) {
	if proc == "" && filepath.Clean(root) == "/sys" {
		proc = "/proc"
	}
	var pfs fs.FS
	if proc != "" {
		pfs = os.DirFS(proc)
	}
	return gpudirect.Judge(r, t, pfs)
}

// printGPUDirect prints each pair's readiness, and what keeps those not
// ready from it.
func printGPUDirect(w io.Writer, v topoView) {
	if len(v.GPUDirect) == 0 {
		return
	}
	fmt.Fprintln(w, "\nGPUDirect RDMA (each GPU with its closest EFAs):")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  GPU\tEFA\tLINK\tSTATUS\tREADY BY")
	for _, p := range v.GPUDirect {
		by := "-"
		if r := p.ReadyBy(); len(r) > 0 {
			by = fmt.Sprint(r[0])
			for _, m := range r[1:] {
				by += ", " + string(m)
			}
		}
		fmt.Fprintf(tw, "  %s %s\t%s %s\t%s\t%s\t%s\n", p.GPU, p.GPUAddress, p.EFA, p.EFAAddress, p.Link, p.Status, by)
	}
	tw.Flush()
	// What NCCL does beyond PXB where a topology file makes it ready:
	// the file, once.
	seen := map[string]bool{}
	for _, p := range v.GPUDirect {
		if p.NCCL != nil && p.NCCL.Status == gpudirect.Ready && p.Link > topology.LinkPXB && !seen[p.NCCL.Message] {
			seen[p.NCCL.Message] = true
			fmt.Fprintf(w, "\nNCCL: pairs at %s\n", p.NCCL.Message)
		}
	}
	// What blocks or is unknown: each check's finding on its first pair,
	// with how many pairs it applies to.
	pairs := make([]gpudirect.Pair, len(v.GPUDirect))
	for i, p := range v.GPUDirect {
		pairs[i] = p.Pair
	}
	var reasons []string
	for _, b := range gpudirect.Blockers(pairs) {
		s := fmt.Sprintf("%s %s, %s: %s", b.Pair.GPU.Name, b.Pair.EFA.Name, b.Key, b.Finding.Message)
		if b.Pairs > 1 {
			s += fmt.Sprintf(" (and %d more pairs)", b.Pairs-1)
		}
		reasons = append(reasons, s)
	}
	if len(reasons) > 0 {
		fmt.Fprintln(w, "\nWhat keeps pairs from ready (each check on the first pair it applies to):")
		fmt.Fprintln(w)
		for _, r := range reasons {
			fmt.Fprintf(w, "  %s\n", r)
		}
		fmt.Fprintln(w, "\nefakit topo -o json gives every finding with its source; docs/operations.md, \"GPUDirect readiness\", says what each means.")
	}
}
