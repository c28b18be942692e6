package resources_test

import (
	"fmt"
	"log"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// ExamplePublished builds the ResourceSlices of a node, as the plugin
// publishes them and `efakit slices` prints them (one function builds
// both), from a bundled p4d.24xlarge capture.
func ExamplePublished() {
	root, err := sysfs.Open("../../../testdata/sysfs/p4d.24xlarge.sysfs") // /sys on the node
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		fmt.Println(err) // the damaged devices; the others are published
	}
	cfg := resources.Config{NodeName: "node-1"}
	res, err := resources.Published(topo, cfg)
	if err != nil {
		fmt.Println(err) // devices left out, and why
	}
	for _, s := range resources.Slices(res, cfg) {
		fmt.Println(s.Spec.Driver, *s.Spec.NodeName, s.Spec.Pool.Name, len(s.Spec.Devices), "devices")
		for _, d := range s.Spec.Devices {
			fmt.Print(" ", d.Name)
			// numaNode is absent where the kernel says -1.
			for _, attr := range []resourceapi.QualifiedName{resources.AttrPCIeRoot, resources.AttrNUMANode, resources.AttrRDMADev, resources.AttrPCIBusID} {
				fmt.Print(" ", value(d.Attributes[attr]))
			}
			fmt.Println()
		}
	}
	// Output:
	// dra.net node-1 node-1 4 devices
	//  efa-0000-10-1b-0 pci0000:10 0 rdmap16s27 0000:10:1b.0
	//  efa-0000-20-1b-0 pci0000:20 0 rdmap32s27 0000:20:1b.0
	//  efa-0000-90-1b-0 pci0000:90 1 rdmap144s27 0000:90:1b.0
	//  efa-0000-a0-1b-0 pci0000:a0 1 rdmap160s27 0000:a0:1b.0
}

// value prints whichever value an attribute holds; "-" for an absent one.
func value(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValues != nil:
		return fmt.Sprint(a.IntValues)
	case a.BoolValues != nil:
		return fmt.Sprint(a.BoolValues)
	case a.StringValues != nil:
		return fmt.Sprint(a.StringValues)
	case a.VersionValues != nil:
		return fmt.Sprint(a.VersionValues)
	}
	return "-"
}
