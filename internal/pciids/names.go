package pciids

import (
	"fmt"
	"os"
	"sync"

	"github.com/jaypipes/pcidb"
)

// EFA is pci.ids's name of every EFA generation, the string AWS's EFA
// DeviceClass selects on.
const EFA = "Elastic Fabric Adapter (EFA)"

// Names gives vendor and device names: first the names built into efakit
// for the Amazon, NVIDIA and Mellanox functions it deals with, then a
// pci.ids database on this machine. The database is parsed only when a
// name the built-in table lacks is asked for, and at most once (a full
// pci.ids costs tens of milliseconds and megabytes of heap, for names no
// output of an EFA machine needs). It never fetches anything over the
// network. A Names is safe for concurrent use; a nil *Names answers from
// the built-in table only.
type Names struct {
	open func() (*pcidb.DB, error) // nil: built-in names only

	mu    sync.Mutex // held while open runs, so it runs once
	tried bool
	db    *pcidb.DB
	err   error
}

// builtinVendors and builtinDevices hold the names pci.ids gives for the
// functions found on EC2 accelerator instances, so that output is the same
// on an AMI without the hwdata/pci.ids package.
var builtinVendors = map[uint16]string{
	0x1d0f: "Amazon.com, Inc.",
	0x10de: "NVIDIA Corporation",
	0x15b3: "Mellanox Technologies",
}

var builtinDevices = map[[2]uint16]string{
	{0x1d0f, 0xefa0}: EFA,
	{0x1d0f, 0xefa1}: EFA,
	{0x1d0f, 0xefa2}: EFA,
	{0x1d0f, 0xefa3}: EFA,
	{0x1d0f, 0xec20}: "Elastic Network Adapter (ENA)",
	{0x1d0f, 0x8061}: "NVMe EBS Controller",
	{0x1d0f, 0xcd01}: "NVMe SSD Controller",
	{0x1d0f, 0x7064}: "NeuronDevice (Inferentia)",
	{0x1d0f, 0x7164}: "NeuronDevice (Trainium)",
	{0x1d0f, 0x7264}: "NeuronDevice (Inferentia2)",
	{0x1d0f, 0x7364}: "NeuronDevice (Trainium2)",
	{0x10de, 0x20b0}: "GA100 [A100 SXM4 40GB]",
	{0x10de, 0x20b2}: "GA100 [A100 SXM4 80GB]",
	{0x10de, 0x2330}: "GH100[H100 SXM5 80GB]",
	{0x10de, 0x2335}: "GH100 [H200 SXM 141GB]",
	{0x10de, 0x2901}: "GB100 [B200]",
	{0x10de, 0x2237}: "GA102GL [A10G]",
	{0x10de, 0x26b9}: "AD102GL [L40S]",
	{0x10de, 0x27b8}: "AD104GL [L4]",
	{0x10de, 0x1af1}: "GA100 [A100 NVSwitch]",
	{0x10de, 0x22a3}: "GH100 [H100 NVSwitch]",
}

// LoadNames returns the names of this machine: the built-in ones, then
// those of the pci.ids database found in the usual places (PCIDB_PATH, read
// now, or pcidb's list of hwdata and pciutils paths) when one is first
// needed. It reads no file itself.
func LoadNames() *Names {
	path := os.Getenv("PCIDB_PATH")
	return newNames(func() (*pcidb.DB, error) {
		noFetch := false
		opts := []*pcidb.WithOption{{EnableNetworkFetch: &noFetch}}
		if path != "" {
			opts = append(opts, pcidb.WithPath(path))
		}
		db, err := pcidb.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("pci.ids: %w (using built-in names)", err)
		}
		return db, nil
	})
}

// LoadNamesFrom returns the built-in names, then those of the pci.ids
// database at path, read when one is first needed.
func LoadNamesFrom(path string) *Names {
	return newNames(func() (*pcidb.DB, error) {
		noFetch := false
		db, err := pcidb.New(&pcidb.WithOption{EnableNetworkFetch: &noFetch}, pcidb.WithPath(path))
		if err != nil {
			return nil, fmt.Errorf("pci.ids %s: %w", path, err)
		}
		return db, nil
	})
}

// newNames returns Names that call open at most once, the first time a
// name the built-in table lacks is asked for.
func newNames(open func() (*pcidb.DB, error)) *Names { return &Names{open: open} }

// database returns the pci.ids database, opening it on first use; nil when
// there is none (Err says why).
func (n *Names) database() *pcidb.DB {
	if n == nil || n.open == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.tried {
		n.tried = true
		n.db, n.err = n.open()
	}
	return n.db
}

// Err says why the pci.ids database could not be used: nil when it was
// read, or has not been needed yet.
func (n *Names) Err() error {
	if n == nil || n.open == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// BuiltinVendor returns the built-in name of a vendor, or "" when it has
// none: the same on every machine.
func BuiltinVendor(vendor uint16) string { return builtinVendors[vendor] }

// BuiltinDevice returns the built-in name of a device, or "".
func BuiltinDevice(vendor, device uint16) string {
	return builtinDevices[[2]uint16{vendor, device}]
}

// Vendor returns the vendor's name, or "" when unknown.
func (n *Names) Vendor(vendor uint16) string {
	if s := BuiltinVendor(vendor); s != "" {
		return s
	}
	if db := n.database(); db != nil {
		if v, ok := db.Vendors[fmt.Sprintf("%04x", vendor)]; ok {
			return v.Name
		}
	}
	return ""
}

// Device returns the device's name, or "" when unknown.
func (n *Names) Device(vendor, device uint16) string {
	if s := BuiltinDevice(vendor, device); s != "" {
		return s
	}
	if db := n.database(); db != nil {
		if p, ok := db.Products[fmt.Sprintf("%04x%04x", vendor, device)]; ok {
			return p.Name
		}
	}
	return ""
}
