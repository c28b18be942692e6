package sysfs_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// ExampleOpen opens a bundled capture of a p5.48xlarge (on a machine,
// "/sys") and reads one EFA's PCI function through a Reader, which
// resolves every symbolic link itself, inside the root.
func ExampleOpen() {
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs") // /sys, a capture file or an unpacked capture
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	r := sysread.New(root)
	const fn = "bus/pci/devices/0000:4f:00.0"
	dir, err := r.Resolve(fn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dir)
	for _, attr := range []string{"vendor", "device", "numa_node"} {
		v, err := r.ReadString(fn + "/" + attr) // without the trailing newline
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(attr, v)
	}
	ents, err := r.ReadDir(fn + "/infiniband")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range ents {
		fmt.Println("infiniband/" + e.Name())
	}
	// Output:
	// devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0
	// vendor 0x1d0f
	// device 0xefa1
	// numa_node 0
	// infiniband/rdmap79s0
}

// ExampleReader: a link that leaves the root is an error for that entry,
// which callers can tell apart with errors.Is; the kernel never makes one,
// so it is damage, and nothing outside the root is read. The root here is a
// small tree in memory.
func ExampleReader() {
	fsys, err := sysfs.NewMemFS([]sysfs.Entry{
		{Kind: sysfs.KindLink, Path: "bus/pci/devices/0000:00:06.0", Target: "../../../../etc"},
		{Kind: sysfs.KindLink, Path: "bus/pci/devices/0000:00:07.0", Target: "../../../devices/pci0000:00/0000:00:07.0"},
		{Kind: sysfs.KindFile, Path: "devices/pci0000:00/0000:00:07.0/vendor", Data: []byte("0x1d0f\n")},
	})
	if err != nil {
		log.Fatal(err)
	}
	r := sysread.New(fsys)
	for _, fn := range []string{"0000:00:06.0", "0000:00:07.0"} {
		v, err := r.ReadString("bus/pci/devices/" + fn + "/vendor")
		switch {
		case errors.Is(err, sysfs.ErrEscapesRoot):
			fmt.Println(fn, "escapes the root:", err)
		case err != nil:
			fmt.Println(fn, err)
		default:
			fmt.Println(fn, "vendor", v)
		}
	}
	// Output:
	// 0000:00:06.0 escapes the root: resolve bus/pci/devices/0000:00:06.0/vendor: link leaves the sysfs root (bus/pci/devices/0000:00:06.0 -> ../../../../etc)
	// 0000:00:07.0 vendor 0x1d0f
}
