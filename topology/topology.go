// Package topology builds, from sysfs alone, the picture a scheduler needs
// to pair accelerators with EFAs: the GPUs, Neuron devices and EFAs of a
// machine, how each pair is connected (the link classes of
// `nvidia-smi topo -m`), which EFAs are closest to each accelerator and the
// reverse, the standard DRA attributes of every device, and the Neuron
// device groups on Trainium machines.
package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
)

// Kind is what a device of the topology is.
type Kind int

// The kinds of device the topology holds. The zero Kind is none of them.
const (
	KindGPU Kind = iota + 1
	KindNeuron
	KindEFA
)

func (k Kind) String() string {
	switch k {
	case KindGPU:
		return "gpu"
	case KindNeuron:
		return "neuron"
	case KindEFA:
		return "efa"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText prints String.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Device is a GPU, a Neuron device or an EFA.
type Device struct {
	Kind Kind
	// Name is GPU<n> (PCI order, as nvidia-smi numbers them by default),
	// NEURON<index> (the neuron driver's index) or the EFA's RDMA name.
	Name string
	// PCI is the function; nil for a Neuron device whose table gives no
	// PCI address (trn3).
	PCI *pcie.Device
	// EFA is set for an EFA.
	EFA *efa.Device
	// NeuronIndex is the neuron driver's index, -1 when unknown.
	NeuronIndex int
	// Groups are the Neuron device groups; nil outside the Trainium
	// families that have them.
	Groups *neuron.Groups
}

// NUMANode returns the device's NUMA node, pcie.NoNUMA when unknown (a
// nil device's too).
func (d *Device) NUMANode() int {
	if d == nil || d.PCI == nil {
		return pcie.NoNUMA
	}
	return d.PCI.NUMANode
}

// IsAccelerator reports a GPU or a Neuron device.
func (d *Device) IsAccelerator() bool {
	return d != nil && (d.Kind == KindGPU || d.Kind == KindNeuron)
}

// Topology is one machine. Treat it as read-only once built: Closest,
// ByName and StandardAttributes answer from an index made at the first of
// them, so a change to Devices, Table or Host after that goes unseen.
type Topology struct {
	Host *host.Info
	// Table is the Neuron family table in use, nil when none applies.
	Table *neuron.Table
	// Devices are the GPUs (PCI order), the Neuron devices (by index)
	// and the EFAs (PCI order).
	Devices []*Device
	// Notes say what could not be worked out and why, without being
	// errors: an unknown instance type gives no device groups.
	Notes []string
	// InactiveEFAs are EFA functions without an RDMA device.
	InactiveEFAs []*pcie.Device

	byPCI map[pcie.Address]*Device
	once  sync.Once
	idx   *index
}

// Scan reads a sysfs root and builds its topology, with one reader so
// that no file is read twice. Every device is read whole: a function's
// revision, NUMA node, local CPUs, PCIe links and IOMMU group, an EFA's
// GUIDs, firmware and gdr file, a Neuron class device's attributes; a field
// left at its unknown value is absent or damaged (the error says which).
// It returns what it could build and the joined errors of what it could
// not read.
func Scan(fsys fs.FS) (*Topology, error) {
	r := sysread.New(fsys)
	tree, perr := pcie.Discover(r)
	res, eerr := efa.Discover(r, tree)
	h, herr := host.Read(r)
	class, nerr := neuron.ReadClass(r)
	t := Build(tree, res, h, class)
	return t, errors.Join(perr, eerr, herr, nerr)
}

// Build assembles the topology from what the other packages read.
func Build(tree *pcie.Tree, efas *efa.Result, h *host.Info, class []neuron.ClassDevice) *Topology {
	t := &Topology{Host: h, byPCI: map[pcie.Address]*Device{}}
	add := func(d *Device) {
		t.Devices = append(t.Devices, d)
		if d.PCI != nil {
			t.byPCI[d.PCI.Address] = d
		}
	}
	gpus := 0
	var neurons []*pcie.Device
	for _, d := range tree.Devices {
		switch {
		case IsGPU(d):
			add(&Device{Kind: KindGPU, Name: fmt.Sprintf("GPU%d", gpus), PCI: d, NeuronIndex: -1})
			gpus++
		case neuron.IsNeuron(d):
			neurons = append(neurons, d)
		}
	}
	t.addNeurons(neurons, class, add)
	for _, e := range efas.EFAs {
		add(&Device{Kind: KindEFA, Name: e.Name, PCI: e.PCI, EFA: e, NeuronIndex: -1})
	}
	t.addEFAGroups()
	t.InactiveEFAs = efas.Inactive
	return t
}

// IsGPU reports an NVIDIA GPU: vendor 10de with a display class (3D or
// VGA). NVSwitches are bridges (class 0x0680) and are not GPUs.
func IsGPU(d *pcie.Device) bool {
	return d.Vendor == 0x10de && d.Class.Base() == sysattr.PCIClassDisplay
}

// addNeurons names the Neuron functions by their index. With a family
// table the index comes from the table (the PCI order is not the index);
// without one, the functions are numbered in PCI order and say so.
func (t *Topology) addNeurons(fns []*pcie.Device, class []neuron.ClassDevice, add func(*Device)) {
	it := ""
	if t.Host != nil {
		it = t.Host.InstanceType
	}
	table, ok := neuron.TableFor(it)
	if !ok {
		if len(fns) > 0 || len(class) > 0 {
			if it == "" {
				t.note("no instance type (%s is missing): no Neuron device groups", sysattr.DMIProductName)
			} else {
				t.note("instance type %s has no Neuron device-group table: no device groups", it)
			}
		}
		for i, d := range fns {
			add(&Device{Kind: KindNeuron, Name: fmt.Sprintf("NEURON?%d", i), PCI: d, NeuronIndex: -1})
		}
		return
	}
	t.Table = table
	placed := map[pcie.Address]bool{}
	var devs []*Device
	for _, i := range table.Indexes() {
		d := &Device{Kind: KindNeuron, Name: fmt.Sprintf("NEURON%d", i), NeuronIndex: i}
		if table.NeuronPCI != nil {
			a := table.NeuronPCI[i]
			fn := findFn(fns, a)
			if fn == nil {
				t.note("%s table: Neuron device %d should be at %s, which holds no Neuron function: its groups are left out", table.Family, i, a)
				continue
			}
			d.PCI = fn
			placed[a] = true
		} else if !hasClass(class, i) {
			// Without PCI addresses only the driver's class devices
			// say which indexes exist.
			continue
		}
		if g, ok := table.NeuronGroups(i); ok {
			d.Groups = &g
		}
		devs = append(devs, d)
	}
	if table.NeuronPCI == nil && len(fns) > 0 {
		t.note("%s table has no Neuron PCI addresses: Neuron devices carry groups but no PCI attributes", table.Family)
	}
	for _, fn := range fns {
		if !placed[fn.Address] && table.NeuronPCI != nil {
			t.note("%s table: Neuron function %s is not in the table: no index, no groups", table.Family, fn.Address)
			devs = append(devs, &Device{Kind: KindNeuron, Name: "NEURON?" + fn.Address.String(), PCI: fn, NeuronIndex: -1})
		}
	}
	if len(class) > 0 && len(class) != len(table.Indexes()) {
		t.note("%s table describes %d Neuron devices, the neuron driver shows %d (an instance size other than %s?)", table.Family, len(table.Indexes()), len(class), table.Size)
	}
	for _, d := range devs {
		add(d)
	}
}

func findFn(fns []*pcie.Device, a pcie.Address) *pcie.Device {
	for _, f := range fns {
		if f.Address == a {
			return f
		}
	}
	return nil
}

func hasClass(class []neuron.ClassDevice, i int) bool {
	for _, c := range class {
		if c.Index == i {
			return true
		}
	}
	return false
}

// addEFAGroups gives the EFAs of a Trainium machine their device groups.
func (t *Topology) addEFAGroups() {
	if t.Table == nil {
		return
	}
	seen := map[pcie.Address]bool{}
	for _, d := range t.Devices {
		if d.Kind != KindEFA {
			continue
		}
		seen[d.PCI.Address] = true
		if g, ok := t.Table.EFAGroups(d.PCI.Address); ok {
			d.Groups = &g
		} else {
			t.note("%s table: EFA %s (%s) is attached to no Neuron device: no groups", t.Table.Family, d.Name, d.PCI.Address)
		}
	}
	var missing []string
	for _, i := range t.Table.Indexes() {
		a := t.Table.NeuronEFA[i]
		if !seen[a] && !slices.Contains(missing, a.String()) {
			missing = append(missing, a.String())
		}
	}
	for _, a := range missing {
		t.note("%s table: no EFA at %s", t.Table.Family, a)
	}
}

func (t *Topology) note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// Lookup returns the device at a PCI address, or nil (a nil topology
// holds none).
func (t *Topology) Lookup(a pcie.Address) *Device {
	if t == nil {
		return nil
	}
	return t.byPCI[a]
}

// ByName returns the device with the given name, or nil when there is none
// (a name of another machine: GPU9 of an 8-GPU one).
func (t *Topology) ByName(name string) *Device {
	if t == nil {
		return nil
	}
	return t.ix().byName[name]
}

// Of returns the devices of one kind, in order.
func (t *Topology) Of(k Kind) []*Device {
	if t == nil {
		return nil
	}
	var out []*Device
	for _, d := range t.Devices {
		if d.Kind == k {
			out = append(out, d)
		}
	}
	return out
}

// Accelerators returns the GPUs and Neuron devices.
func (t *Topology) Accelerators() []*Device {
	if t == nil {
		return nil
	}
	var out []*Device
	for _, d := range t.Devices {
		if d.IsAccelerator() {
			out = append(out, d)
		}
	}
	return out
}
