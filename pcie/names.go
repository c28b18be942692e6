package pcie

import (
	"fmt"
	"os"

	"github.com/jaypipes/pcidb"
)

// Names gives vendor and device names from a pci.ids database found on this
// machine, falling back to the names built into efakit for the Amazon,
// NVIDIA and Mellanox functions it deals with. It never fetches anything
// over the network.
type Names struct {
	db *pcidb.DB
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
	{0x1d0f, 0xefa0}: "Elastic Fabric Adapter (EFA)",
	{0x1d0f, 0xefa1}: "Elastic Fabric Adapter (EFA)",
	{0x1d0f, 0xefa2}: "Elastic Fabric Adapter (EFA)",
	{0x1d0f, 0xefa3}: "Elastic Fabric Adapter (EFA)",
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

// LoadNames looks for a pci.ids database in the usual places on this
// machine (PCIDB_PATH or pcidb's list of hwdata and pciutils paths) and
// returns a Names that uses it, or only the built-in names when there is
// none. The error says why the database could not be used; the Names is
// usable either way.
func LoadNames() (*Names, error) {
	noFetch := false
	opts := []*pcidb.WithOption{{EnableNetworkFetch: &noFetch}}
	if p := os.Getenv("PCIDB_PATH"); p != "" {
		opts = append(opts, pcidb.WithPath(p))
	}
	db, err := pcidb.New(opts...)
	if err != nil {
		return &Names{}, fmt.Errorf("pci.ids: %w (using built-in names)", err)
	}
	return &Names{db: db}, nil
}

// LoadNamesFrom reads the pci.ids database at path.
func LoadNamesFrom(path string) (*Names, error) {
	noFetch := false
	db, err := pcidb.New(&pcidb.WithOption{EnableNetworkFetch: &noFetch}, pcidb.WithPath(path))
	if err != nil {
		return &Names{}, fmt.Errorf("pci.ids %s: %w", path, err)
	}
	return &Names{db: db}, nil
}

// Vendor returns the vendor's name, or "" when unknown.
func (n *Names) Vendor(vendor uint16) string {
	if n != nil && n.db != nil {
		if v, ok := n.db.Vendors[fmt.Sprintf("%04x", vendor)]; ok {
			return v.Name
		}
	}
	return builtinVendors[vendor]
}

// Device returns the device's name, or "" when unknown.
func (n *Names) Device(vendor, device uint16) string {
	if n != nil && n.db != nil {
		if p, ok := n.db.Products[fmt.Sprintf("%04x%04x", vendor, device)]; ok {
			return p.Name
		}
	}
	return builtinDevices[[2]uint16{vendor, device}]
}
