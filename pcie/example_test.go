package pcie_test

import (
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"testing/fstest"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// Example_ownFS: every reader takes any fs.ReadLinkFS as the sysfs root.
// Here a tree made in memory with the standard library's fstest.MapFS:
// one EFA function, linked from bus/pci/devices as the kernel links it.
func Example_ownFS() {
	fn := "devices/pci0000:10/0000:10:1b.0/"
	root := fstest.MapFS{
		"bus/pci/devices/0000:10:1b.0": {Mode: fs.ModeSymlink, Data: []byte("../../../devices/pci0000:10/0000:10:1b.0")},
		fn + "vendor":                  {Data: []byte("0x1d0f\n")},
		fn + "device":                  {Data: []byte("0xefa0\n")},
		fn + "class":                   {Data: []byte("0x020000\n")},
		fn + "numa_node":               {Data: []byte("0\n")},
	}
	tree, err := pcie.Discover(sysread.New(root))
	if err != nil {
		fmt.Println(err) // one error per damaged function or file
	}
	for _, d := range tree.Devices {
		fmt.Printf("%s %04x:%04x %s root %s NUMA %d\n", d.Address, d.Vendor, d.Device, d.Class, d.Root, d.NUMANode)
	}
	// Output:
	// 0000:10:1b.0 1d0f:efa0 0x020000 root pci0000:10 NUMA 0
}

// Example_unpackedCapture: a capture unpacked into a directory (what
// efakit snapshot --unpack writes) is read through os.DirFS like /sys
// itself; sysfs.Open does the same and also takes the capture file.
func Example_unpackedCapture() {
	capture, err := sysfs.Open("../testdata/sysfs/g5.8xlarge.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	defer capture.Close()
	dir, err := os.MkdirTemp("", "sys")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := sysfs.WriteDir(filepath.Join(dir, "sys"), capture.ReadLinkFS.(*sysfs.MemFS).Entries()); err != nil {
		log.Fatal(err)
	}
	root := os.DirFS(filepath.Join(dir, "sys")).(fs.ReadLinkFS)
	tree, err := pcie.Discover(sysread.New(root))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(tree.Devices), "PCI functions")
	// Output:
	// 7 PCI functions
}
