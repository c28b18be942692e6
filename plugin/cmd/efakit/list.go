package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/pciids"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// efaView is one EFA in list's JSON and YAML output.
type efaView struct {
	Name       string   `json:"name"`
	PCIAddress string   `json:"pciAddress"`
	Generation string   `json:"generation"`
	PCIDevice  string   `json:"pciDevice"`
	Uverbs     *string  `json:"uverbs"`
	DevicePath *string  `json:"devicePath"`
	DevNumber  *string  `json:"devNumber"`
	NUMANode   *int     `json:"numaNode"`
	LocalCPUs  string   `json:"localCPUs,omitempty"`
	PCIeRoot   string   `json:"pcieRoot"`
	Bridges    []string `json:"bridges"`
	NodeGUID   string   `json:"nodeGUID,omitempty"`
	Netdev     string   `json:"netdev,omitempty"`
	P2P        string   `json:"p2p,omitempty"`
	// GDR is the legacy gdr file of efa drivers before 2.6.0.
	GDR        *bool     `json:"gdr,omitempty"`
	PCIeLink   *linkView `json:"pcieLink,omitempty"`
	IOMMUGroup *int      `json:"iommuGroup"`
	// DriverVersion is module/efa/version, the same for every EFA of a
	// machine; absent for the in-tree driver or a version unknown.
	DriverVersion string     `json:"driverVersion,omitempty"`
	Ports         []portView `json:"ports"`
	Driver        string     `json:"driver,omitempty"`
	Subsystem     string     `json:"pciSubsystem"`
	Vendor        string     `json:"pciVendor"`
	// Accelerators are the PCI addresses of the closest GPUs or Neuron
	// devices (topology.Closest).
	Accelerators []string       `json:"accelerators"`
	DeviceGroups *neuron.Groups `json:"deviceGroups"`
	sortAddress  pcie.Address   `json:"-"`
}

// linkView is a function's PCIe link: current and maximum, each half null
// where unknown; absent for a function without link files.
type linkView struct {
	Current linkEnd `json:"current"`
	Max     linkEnd `json:"max"`
	// Degraded says the link runs slower or narrower than its maximum.
	Degraded bool `json:"degraded"`
}

type linkEnd struct {
	SpeedGTs *float64 `json:"speedGTs"`
	Width    *int     `json:"width"` // 0: the link is down
}

func newLinkEnd(l *pcie.LinkRate) linkEnd {
	var e linkEnd
	if l == nil {
		return e
	}
	if l.Speed > 0 {
		s := l.Speed
		e.SpeedGTs = &s
	}
	if l.Width != pcie.UnknownWidth {
		w := l.Width
		e.Width = &w
	}
	return e
}

// newLinkView is d's link, nil without link files.
func newLinkView(d *pcie.Device) *linkView {
	if d.CurrentLink == nil && d.MaxLink == nil {
		return nil
	}
	v := &linkView{Current: newLinkEnd(d.CurrentLink), Max: newLinkEnd(d.MaxLink)}
	v.Degraded = d.CurrentLink != nil && d.MaxLink != nil && d.CurrentLink.Below(*d.MaxLink)
	return v
}

// iommuGroup is d's IOMMU group, nil without one.
func iommuGroup(d *pcie.Device) *int {
	if d.IOMMUGroup == pcie.NoIOMMUGroup {
		return nil
	}
	g := d.IOMMUGroup
	return &g
}

type portView struct {
	Port      int     `json:"port"`
	State     string  `json:"state"`
	PhysState string  `json:"physState"`
	LinkLayer string  `json:"linkLayer"`
	RateGbps  float64 `json:"rateGbps"`
	GID       string  `json:"gid,omitempty"`
}

// newEFAView is an EFA's view; with names (JSON and YAML, which print
// them), its vendor and device names too.
func newEFAView(d *efa.Device, names *pciids.Names) efaView {
	v := efaView{
		Name:         d.Name,
		PCIAddress:   d.PCI.Address.String(),
		Generation:   d.Generation.String(),
		Subsystem:    fmt.Sprintf("%04x:%04x", d.PCI.SubsystemVendor, d.PCI.SubsystemDevice),
		PCIeRoot:     d.PCI.Root,
		Bridges:      []string{},
		NodeGUID:     d.NodeGUID,
		Netdev:       d.Netdev,
		P2P:          d.P2P,
		GDR:          d.GDR,
		PCIeLink:     newLinkView(d.PCI),
		IOMMUGroup:   iommuGroup(d.PCI),
		Driver:       d.PCI.Driver,
		Ports:        []portView{},
		Accelerators: []string{},
		sortAddress:  d.PCI.Address,
	}
	if names != nil {
		v.PCIDevice = names.Device(d.PCI.Vendor, d.PCI.Device)
		v.Vendor = names.Vendor(d.PCI.Vendor)
	}
	if d.Verbs != nil {
		u, p, n := d.Verbs.Name, d.Verbs.DevicePath(), fmt.Sprintf("%d:%d", d.Verbs.Major, d.Verbs.Minor)
		v.Uverbs, v.DevicePath, v.DevNumber = &u, &p, &n
	}
	if d.PCI.NUMANode != pcie.NoNUMA {
		n := d.PCI.NUMANode
		v.NUMANode = &n
	}
	if d.PCI.LocalCPUs != nil {
		v.LocalCPUs = d.PCI.LocalCPUs.String()
	}
	for _, b := range d.PCI.Bridges() {
		v.Bridges = append(v.Bridges, b.Address.String())
	}
	for _, p := range d.Ports {
		v.Ports = append(v.Ports, portView{Port: p.Number, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer, RateGbps: p.RateGbps, GID: p.GID})
	}
	return v
}

func cmdList(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("list")
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	out := fl.String("o", "table", "output `format`: table, json or yaml")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	switch *out {
	case "table", "json", "yaml":
	default:
		fmt.Fprintf(stderr, "efakit list: unknown output format %q (table, json, yaml)\n", *out)
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit list: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit list", r)
	topo, scanErr := placed.Scan(r, true)
	version, verErr := efa.ReadDriverVersion(r)
	scanErr = errors.Join(scanErr, verErr)
	// The table prints no names. JSON and YAML do: the built-in ones, or
	// the machine's pci.ids where a function's name is not built in.
	var names *pciids.Names
	if *out != "table" {
		names = pciids.LoadNames()
	}
	views := make([]efaView, 0)
	for _, d := range topo.Of(topology.KindEFA) {
		v := newEFAView(d.EFA, names)
		for _, a := range topo.Closest(d) {
			if a.PCI != nil {
				v.Accelerators = append(v.Accelerators, a.PCI.Address.String())
			}
		}
		v.DeviceGroups = d.Groups
		v.DriverVersion = version
		views = append(views, v)
	}
	if err := printEFAs(stdout, *out, views); err != nil {
		fmt.Fprintf(stderr, "efakit list: %v\n", err)
		return 1
	}
	for _, d := range topo.InactiveEFAs {
		fmt.Fprintf(stderr, "efakit list: note: EFA function %s has no RDMA device (efa driver not bound?)\n", d.Address)
	}
	if scanErr != nil {
		printErrors(stderr, "efakit list", scanErr)
		return 1
	}
	return 0
}

// printNote prints the note of a capture read as the sysfs root
// (sysfs.Root.Note): one in the old format cannot be checked whole.
func printNote(w io.Writer, prefix string, r *sysfs.Root) {
	if n := r.Note(); n != "" {
		fmt.Fprintf(w, "%s: note: %s: %s\n", prefix, r.Source, n)
	}
}

// printErrors prints each joined error on its own line.
func printErrors(w io.Writer, prefix string, err error) {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			printErrors(w, prefix, e)
		}
		return
	}
	fmt.Fprintf(w, "%s: %v\n", prefix, err)
}

func printEFAs(w io.Writer, format string, views []efaView) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(views, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(views)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPCI\tGEN\tUVERBS\tNUMA\tPCIE ROOT\tLINK\tRATE\tSTATE\tNETDEV")
	for _, v := range views {
		uv, numa, rate, state := "-", "-", "-", "-"
		if v.Uverbs != nil {
			uv = *v.Uverbs
		}
		if v.NUMANode != nil {
			numa = fmt.Sprint(*v.NUMANode)
		}
		if len(v.Ports) > 0 {
			var rs, ss []string
			for _, p := range v.Ports {
				rs = append(rs, fmt.Sprintf("%g Gb/s", p.RateGbps))
				ss = append(ss, p.State)
			}
			rate, state = strings.Join(rs, ","), strings.Join(ss, ",")
		}
		nd := v.Netdev
		if nd == "" {
			nd = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.PCIAddress, v.Generation, uv, numa, v.PCIeRoot, linkCell(v.PCIeLink), rate, state, nd)
	}
	if len(views) == 0 {
		fmt.Fprintln(tw, "(no EFA devices)")
	}
	if err := tw.Flush(); err != nil || len(views) == 0 {
		return err
	}
	version := "in-tree or unknown (no module/efa/version)"
	if views[0].DriverVersion != "" {
		version = views[0].DriverVersion
	}
	_, err := fmt.Fprintf(w, "\nefa driver: %s\n", version)
	return err
}

// linkCell is the table's LINK: "x16 16GT/s", with the maximum after it
// when the link runs below it; "-" without link files.
func linkCell(v *linkView) string {
	if v == nil {
		return "-"
	}
	end := func(e linkEnd) string {
		var l pcie.LinkRate
		l.Width = pcie.UnknownWidth
		if e.Width != nil {
			l.Width = *e.Width
		}
		if e.SpeedGTs != nil {
			l.Speed = *e.SpeedGTs
		}
		return l.String()
	}
	if v.Degraded {
		return end(v.Current) + " (max " + end(v.Max) + ")"
	}
	return end(v.Current)
}
