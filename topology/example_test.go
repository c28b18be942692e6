package topology_test

import (
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// Example is the one docs/library.md starts from, on a bundled p4d.24xlarge
// capture instead of /sys: every EFA
// with its uverbs node, PCIe root, NUMA node and closest GPUs.
func Example() {
	root, err := sysfs.Open("../testdata/sysfs/p4d.24xlarge.sysfs") // /sys, a capture file or an unpacked capture
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		fmt.Println(err) // one line per damaged device or file; topo holds the rest
	}
	for _, d := range topo.Of(topology.KindEFA) {
		attrs, _ := topo.StandardAttributes(d) // pcieRoot, pciBusID, numaNode
		var closest []string
		for _, a := range topo.Closest(d) {
			closest = append(closest, a.Name)
		}
		// DevicePath is "" where the kernel made no uverbs device.
		fmt.Println(d.Name, d.EFA.Verbs.DevicePath(), attrs.PCIeRoot, d.NUMANode(), closest)
	}
	// Output:
	// rdmap16s27 /dev/infiniband/uverbs0 pci0000:10 0 [GPU0 GPU1]
	// rdmap32s27 /dev/infiniband/uverbs1 pci0000:20 0 [GPU2 GPU3]
	// rdmap144s27 /dev/infiniband/uverbs2 pci0000:90 1 [GPU4 GPU5]
	// rdmap160s27 /dev/infiniband/uverbs3 pci0000:a0 1 [GPU6 GPU7]
}

// Example_withoutUverbs: where ib_uverbs is not loaded the kernel makes no
// uverbs device. The EFA is still found, its error says what is missing,
// and its Verbs is nil, whose DevicePath is "". The capture here is the
// bundled g5.8xlarge (one EFA, efa_0) without its infiniband_verbs
// entries.
func Example_withoutUverbs() {
	f, err := os.Open("../testdata/sysfs/g5.8xlarge.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	entries, err := sysfs.ParseCapture(f)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	var kept []sysfs.Entry
	for _, e := range entries {
		if !strings.Contains(e.Path, "infiniband_verbs") {
			kept = append(kept, e)
		}
	}
	fsys, err := sysfs.NewMemFS(kept)
	if err != nil {
		log.Fatal(err)
	}
	topo, err := topology.Scan(fsys)
	if err != nil {
		fmt.Println(err)
	}
	for _, d := range topo.Of(topology.KindEFA) {
		fmt.Printf("%s verbs=%v path=%q\n", d.Name, d.EFA.Verbs, d.EFA.Verbs.DevicePath())
	}
	// Output:
	// efa efa_0: devices/pci0000:00/0000:00:06.0/infiniband_verbs: file does not exist
	// efa_0 verbs=<nil> path=""
}

// ExampleTopology_Closest: on a p5.48xlarge each GPU has the four EFAs
// behind its PCIe switch, and each of those EFAs that GPU.
func ExampleTopology_Closest() {
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		log.Fatal(err)
	}
	gpu := topo.ByName("GPU0")
	for _, e := range topo.Closest(gpu) {
		fmt.Println(gpu.Name, topo.Link(gpu, e), e.Name, e.PCI.Address)
	}
	efa := topo.Closest(gpu)[0]
	for _, a := range topo.Closest(efa) {
		fmt.Println(efa.Name, topo.Link(efa, a), a.Name)
	}
	// Output:
	// GPU0 PXB rdmap79s0 0000:4f:00.0
	// GPU0 PXB rdmap80s0 0000:50:00.0
	// GPU0 PXB rdmap81s0 0000:51:00.0
	// GPU0 PXB rdmap82s0 0000:52:00.0
	// rdmap79s0 PXB GPU0
}

// ExampleTopology_Closest_trainium: on a trn1.32xlarge the PCI tree puts
// four Neuron devices at one distance from each EFA; the family table
// says which two it serves, and its device groups are AWS's.
func ExampleTopology_Closest_trainium() {
	root, err := sysfs.Open("../testdata/sysfs/trn1.32xlarge.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		log.Fatal(err)
	}
	efa := topo.ByName("rdmap16s25") // 0000:10:19.0
	for _, n := range topo.Closest(efa) {
		fmt.Println(efa.Name, "serves", n.Name, n.PCI.Address)
	}
	if efa.Groups != nil { // nil outside the Trainium families
		fmt.Println("devicegroup4_id", efa.Groups.Group4)
		fmt.Println("devicegroup16_id", efa.Groups.Group16)
	}
	// Output:
	// rdmap16s25 serves NEURON12 0000:10:1c.0
	// rdmap16s25 serves NEURON13 0000:10:1d.0
	// devicegroup4_id 178a9e264a26793e
	// devicegroup16_id fb838249c99a6341
}

// ExampleTopology_StandardAttributes: the standard DRA attributes of a
// device, as k8s.io/dynamic-resource-allocation/deviceattribute computes
// them. NUMANode is nil where the kernel says -1 (g5.8xlarge).
func ExampleTopology_StandardAttributes() {
	for _, capture := range []string{"p5.48xlarge", "g5.8xlarge"} {
		root, err := sysfs.Open("../testdata/sysfs/" + capture + ".sysfs")
		if err != nil {
			log.Fatal(err)
		}
		topo, err := topology.Scan(root)
		root.Close()
		if err != nil {
			log.Fatal(err)
		}
		d := topo.Of(topology.KindEFA)[0]
		attrs, ok := topo.StandardAttributes(d)
		if !ok {
			continue // a Neuron device without a known PCI function
		}
		numa := "absent"
		if attrs.NUMANode != nil {
			numa = fmt.Sprint(*attrs.NUMANode)
		}
		fmt.Printf("%s %s: pcieRoot=%s pciBusID=%s numaNode=%s\n", capture, d.Name, attrs.PCIeRoot, attrs.PCIBusID, numa)
	}
	// Output:
	// p5.48xlarge rdmap79s0: pcieRoot=pci0000:44 pciBusID=0000:4f:00.0 numaNode=0
	// g5.8xlarge efa_0: pcieRoot=pci0000:00 pciBusID=0000:00:06.0 numaNode=absent
}
