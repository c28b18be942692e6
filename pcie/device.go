// Package pcie reads the PCI functions of a sysfs root into a tree: each
// function with its IDs, class, driver, NUMA node and CPUs, its chain of
// upstream bridges and its root complex.
package pcie

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// NoNUMA is the NUMA node of a function the kernel ties to no node.
const NoNUMA = -1

// Class is the 24-bit PCI class code: base class, subclass, programming
// interface.
type Class uint32

// Base returns the base class (0x02 network, 0x03 display, 0x06 bridge...).
func (c Class) Base() uint8 { return uint8(c >> 16) }

// Sub returns the base class and subclass, as 0x0604 for a PCI bridge.
func (c Class) Sub() uint16 { return uint16(c >> 8) }

// String prints the class as sysfs does, 0x020000.
func (c Class) String() string { return fmt.Sprintf("0x%06x", uint32(c)) }

// Class codes efakit branches on.
const (
	classBridgeHost  uint16 = 0x0600
	classBridgePCI   uint16 = 0x0604
	classNetwork     uint8  = 0x02
	classDisplay3D   uint16 = 0x0302
	classDisplayVGA  uint16 = 0x0300
	classBridgeOther uint16 = 0x0680
)

// Device is one PCI function. Fields name the sysfs file they come from,
// relative to the function's directory.
type Device struct {
	Address Address
	// Path is the function's real directory, e.g.
	// devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0.
	Path            string
	Vendor          uint16 // vendor
	Device          uint16 // device
	SubsystemVendor uint16 // subsystem_vendor; 0 where absent or damaged
	SubsystemDevice uint16 // subsystem_device; 0 where absent or damaged
	Class           Class  // class
	Revision        uint8  // revision; 0 where absent or damaged
	// Driver is uevent's DRIVER, or the base name of the driver link
	// without a uevent; "" when unbound, or when the link is damaged or
	// names no printable driver (CheckName). A DRIVER that CheckName
	// refuses damages the uevent: the function is left out.
	Driver string
	// NUMANode is numa_node; NoNUMA when it says -1. Where numa_node is
	// absent or damaged (its error is returned), the one node whose CPUs
	// (node<N>/cpulist) are exactly LocalCPUs, else NoNUMA.
	NUMANode int
	// LocalCPUs is local_cpulist; nil when absent or damaged. The
	// functions of one Discover with the same list share it: read-only.
	LocalCPUs CPUList
	// Root is the root complex, the first component under devices/
	// ("pci0000:44"), as the standard pcieRoot attribute.
	Root string
	// Parent is the upstream bridge; nil for a function on a root bus.
	Parent *Device
	// Children are the functions directly below a bridge, in address order.
	Children []*Device
	// CurrentLink and MaxLink are the PCIe link now and at best
	// (current_link_speed and _width, max_link_speed and _width); nil
	// where the function has neither file of the pair (it is not PCI
	// Express: many virtual and root-complex functions).
	CurrentLink, MaxLink *LinkRate
	// IOMMUGroup is the number of the group iommu_group links to;
	// NoIOMMUGroup without the link (no IOMMU), or when it is damaged.
	IOMMUGroup int
}

// IsBridge reports whether the function is a PCI-to-PCI bridge (a root
// port, or a switch's upstream or downstream port).
func (d *Device) IsBridge() bool { return d.Class.Sub() == classBridgePCI }

// Bridges returns the upstream bridges from the root complex down to the
// function's parent.
func (d *Device) Bridges() []*Device {
	var out []*Device
	for p := d.Parent; p != nil; p = p.Parent {
		out = append(out, p)
	}
	slices.Reverse(out)
	return out
}

// Tree is every PCI function of a root.
type Tree struct {
	Devices []*Device // in address order
	byAddr  map[Address]*Device
}

// Lookup returns the function at a, or nil.
func (t *Tree) Lookup(a Address) *Device {
	if t == nil {
		return nil
	}
	return t.byAddr[a]
}

// optional names the attributes of a function that a lean pass may leave
// unread (internal/sysread's PCI bits): discovery needs only the uevent
// (or the vendor, device, class and driver files without one) to know
// and place a function.
type optional uint8

const (
	optRevision  = optional(sysread.PCIRevision)  // revision: Device.Revision
	optNUMANode  = optional(sysread.PCINUMANode)  // numa_node: Device.NUMANode
	optLocalCPUs = optional(sysread.PCILocalCPUs) // local_cpulist: Device.LocalCPUs
	optLink      = optional(sysread.PCILink)      // {current,max}_link_{speed,width}: Device.CurrentLink, MaxLink
	optIOMMU     = optional(sysread.PCIIOMMU)     // the iommu_group link: Device.IOMMUGroup
	optAll       = optional(sysread.PCIAll)
)

// Discover reads every function listed in bus/pci/devices, each with all
// its attributes. It returns the functions it could read and, joined, one
// error per function or file it could not: a function whose vendor,
// device or class cannot be read is left out; one whose optional
// attributes are damaged is kept, with the damaged field unknown.
func Discover(fsys fs.FS) (*Tree, error) {
	r := sysread.New(fsys)
	want := func(*Device) optional { return optAll }
	if l := r.Lean(); l != nil {
		want = func(d *Device) optional {
			if l.PCI == nil {
				return 0
			}
			return optional(l.PCI(d.Vendor, d.Device, uint32(d.Class), d.Driver))
		}
	}
	return discoverOnly(r, want)
}

// discoverOnly is Discover reading, of each function's optional
// attributes, only those want returns for it (want sees the function's
// IDs, class and driver). The others keep their unknown values. Each
// attribute is a file: on a p5.48xlarge, whose 121 functions include 65
// switch ports, reading them only where they are used saves four system
// calls each.
func discoverOnly(r *sysread.Reader, want func(*Device) optional) (*Tree, error) {
	// Every entry is a link that is followed: read them with the listing.
	ents, err := r.ReadDirLinks(sysattr.PCIDevicesDir)
	if err != nil {
		return &Tree{byAddr: map[Address]*Device{}}, fmt.Errorf("pci: %w", err)
	}
	t := &Tree{byAddr: make(map[Address]*Device, len(ents))}
	var errs []error
	// Every function of a NUMA node has the same local_cpulist: parse
	// each distinct one once, and let the functions share it.
	cpus, nodes := map[string]CPUList{}, &nodeCPUs{}
	for _, e := range ents {
		d, derrs := readDevice(r, e.Name(), cpus, nodes, want)
		errs = append(errs, derrs...)
		if d == nil {
			continue
		}
		if other := t.byAddr[d.Address]; other != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: e.Name(), File: path.Join(sysattr.PCIDevicesDir, e.Name()), Err: fmt.Errorf("same function as %s", other.Path)})
			continue
		}
		t.byAddr[d.Address] = d
		t.Devices = append(t.Devices, d)
	}
	slices.SortFunc(t.Devices, func(a, b *Device) int { return a.Address.Compare(b.Address) })
	// Parents from the real paths: the component before the function's own
	// is its upstream bridge when it is a function too.
	for _, d := range t.Devices {
		dir := path.Dir(d.Path)
		if pa, err := ParseAddress(path.Base(dir)); err == nil && path.Dir(dir) != "devices" {
			if p := t.byAddr[pa]; p != nil && p.Path == dir {
				d.Parent = p
				p.Children = append(p.Children, d)
				continue
			}
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: d.Address.String(), File: d.Path, Err: fmt.Errorf("upstream bridge %s is not listed in %s", pa, sysattr.PCIDevicesDir)})
		}
	}
	return t, errors.Join(errs...)
}

// readDevice reads one function. It returns nil when a required file is
// missing or damaged.
func readDevice(r *sysread.Reader, name string, cpus map[string]CPUList, nodes *nodeCPUs, want func(*Device) optional) (*Device, []error) {
	link := path.Join(sysattr.PCIDevicesDir, name)
	fail := func(file string, err error) []error {
		return []error{&sysfs.Error{Subsystem: "pci", Device: name, File: file, Err: fserr.Cause(err)}}
	}
	addr, err := ParseAddress(name)
	if err != nil {
		return nil, fail(link, err)
	}
	// uevent is read through the link before the link is resolved: on a
	// directory root the open refuses any link on the way, so when it
	// succeeds the Reader knows the function's directory, and resolving
	// the link below asks the file system nothing more.
	ue, ueErr := r.ReadString(link + "/uevent")
	real, err := r.Resolve(link)
	if err != nil {
		return nil, fail(link, err)
	}
	parts := strings.Split(real, "/")
	for _, p := range parts {
		if err := names.CheckName(p); err != nil {
			return nil, fail(link, fmt.Errorf("resolves to a path with a bad name: %w", err))
		}
	}
	if len(parts) < 3 || parts[0] != "devices" || parts[len(parts)-1] != name {
		return nil, fail(link, fmt.Errorf("resolves to %s, want devices/pci<domain>:<bus>/.../%s", real, name))
	}
	if !isRootComplex(parts[1]) {
		return nil, fail(link, fmt.Errorf("resolves to %s: %q is not a root complex (pci<domain>:<bus>)", real, parts[1]))
	}
	d := &Device{Address: addr, Path: real, Root: parts[1], NUMANode: NoNUMA, IOMMUGroup: NoIOMMUGroup}
	file := func(f string) string { return real + "/" + f }

	var errs []error
	// uevent holds the IDs, class and driver in one file, where the
	// attribute files take six reads; those are the fallback for a kernel
	// (or a capture) without it.
	idsFromUevent := false
	switch s, err := ue, ueErr; {
	case err == nil:
		u, perr := parseUevent(s)
		if perr != nil {
			return nil, fail(file("uevent"), perr)
		}
		if u.Slot != "" && u.Slot != name {
			return nil, fail(file("uevent"), fmt.Errorf("PCI_SLOT_NAME=%q names another function", u.Slot))
		}
		if u.Complete {
			d.Vendor, d.Device, d.SubsystemVendor, d.SubsystemDevice, d.Class, d.Driver = u.Vendor, u.Device, u.SubsystemVendor, u.SubsystemDevice, u.Class, u.Driver
			idsFromUevent = true
		}
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
	default:
		return nil, fail(file("uevent"), err)
	}

	optional := func(f string, parse func(string) error) {
		s, err := r.ReadString(file(f))
		if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink) {
			return // old kernels, or a kernel without NUMA
		}
		if err == nil {
			err = parse(s)
		}
		if err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: name, File: file(f), Err: fserr.Cause(err)})
		}
	}
	hexInto := func(bits int, dst func(uint64)) func(string) error {
		return func(s string) error {
			v, err := parseHexAttr(s, bits)
			if err == nil {
				dst(v)
			}
			return err
		}
	}
	if !idsFromUevent {
		// Required: without these the function cannot be classified.
		for _, f := range []struct {
			name string
			bits int
			dst  func(uint64)
		}{
			{"vendor", 16, func(v uint64) { d.Vendor = uint16(v) }},
			{"device", 16, func(v uint64) { d.Device = uint16(v) }},
			{"class", 24, func(v uint64) { d.Class = Class(v) }},
		} {
			s, err := r.ReadString(file(f.name))
			if err == nil {
				var v uint64
				if v, err = parseHexAttr(s, f.bits); err == nil {
					f.dst(v)
					continue
				}
			}
			return nil, fail(file(f.name), err)
		}
		optional("subsystem_vendor", hexInto(16, func(v uint64) { d.SubsystemVendor = uint16(v) }))
		optional("subsystem_device", hexInto(16, func(v uint64) { d.SubsystemDevice = uint16(v) }))
		// The driver is the base name of the link; resolving it proves the
		// driver directory exists (a dangling link is damage, not a driver).
		// A name that cannot be printed stays unknown.
		drv, err := r.Resolve(file("driver"))
		if err == nil {
			err = names.CheckName(path.Base(drv))
		}
		switch {
		case err == nil:
			d.Driver = path.Base(drv)
		case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
			// unbound
		default:
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: name, File: file("driver"), Err: fserr.Cause(err)})
		}
	}
	errs = append(errs, readOptional(r, d, name, want(d), cpus, nodes)...)
	return d, errs
}

// isRootComplex reports whether s names a root complex directory,
// "pci0000:44".
func isRootComplex(s string) bool {
	rest, ok := strings.CutPrefix(s, "pci")
	if !ok {
		return false
	}
	dom, bus, ok := strings.Cut(rest, ":")
	if !ok {
		return false
	}
	_, err1 := parseHex(dom, 8)
	_, err2 := parseHex(bus, 2)
	return err1 == nil && err2 == nil
}

// parseHexAttr parses a sysfs hex attribute such as "0x1d0f" into a value
// of at most bits bits.
func parseHexAttr(s string, bits int) (uint64, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, fmt.Errorf("%q is not a 0x-prefixed hex number", clip(s))
	}
	v, err := parseHex(h, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a 0x-prefixed hex number", clip(s))
	}
	if v>>bits != 0 {
		return 0, fmt.Errorf("%q does not fit in %d bits", clip(s), bits)
	}
	return v, nil
}

// parseNUMANode parses numa_node: a node number, or -1 for none.
func parseNUMANode(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > 1<<16 {
		return 0, fmt.Errorf("%q is not a NUMA node (-1 or 0-65536)", clip(s))
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// uevent is what a PCI function's uevent file says of it.
type uevent struct {
	Vendor, Device                   uint16 // PCI_ID
	SubsystemVendor, SubsystemDevice uint16 // PCI_SUBSYS_ID
	Class                            Class  // PCI_CLASS
	Driver                           string // DRIVER; "" when unbound
	Slot                             string // PCI_SLOT_NAME
	// Complete is set when PCI_ID, PCI_SUBSYS_ID and PCI_CLASS were all
	// there.
	Complete bool
}

// parseUevent parses a PCI function's uevent file, lines of KEY=value as
// the kernel's pci_uevent writes them (PCI_CLASS=20000, PCI_ID=1D0F:EFA1).
// Unknown keys are ignored; a known key with a bad value is an error.
func parseUevent(s string) (uevent, error) {
	var u uevent
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return uevent{}, fmt.Errorf("uevent line %q is not KEY=value", clip(line))
		}
		switch k {
		case "PCI_ID", "PCI_SUBSYS_ID":
			a, b, ok := strings.Cut(v, ":")
			x, err1 := parseHex(a, 4)
			y, err2 := parseHex(b, 4)
			if !ok || err1 != nil || err2 != nil {
				return uevent{}, fmt.Errorf("uevent %s=%q is not VVVV:DDDD", k, clip(v))
			}
			if k == "PCI_ID" {
				u.Vendor, u.Device = uint16(x), uint16(y)
				seen |= 1
			} else {
				u.SubsystemVendor, u.SubsystemDevice = uint16(x), uint16(y)
				seen |= 2
			}
		case "PCI_CLASS":
			c, err := parseHex(v, 6)
			if err != nil {
				return uevent{}, fmt.Errorf("uevent PCI_CLASS=%q is not a class code", clip(v))
			}
			u.Class = Class(c)
			seen |= 4
		case "DRIVER":
			if err := names.CheckName(v); err != nil {
				return uevent{}, fmt.Errorf("uevent DRIVER is not a driver name: %w", err)
			}
			u.Driver = v
		case "PCI_SLOT_NAME":
			u.Slot = v
		}
	}
	u.Complete = seen == 7
	return u, nil
}
