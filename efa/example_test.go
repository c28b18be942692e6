package efa_test

import (
	"fmt"
	"log"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
)

// ExampleScan lists the EFAs of a bundled p4d.24xlarge capture (on a
// machine, open "/sys"): RDMA name, PCI function, generation, uverbs node
// and device number, port, and the ENA interface beside each.
func ExampleScan() {
	root, err := sysfs.Open("../testdata/sysfs/p4d.24xlarge.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	tree, res, err := efa.Scan(root)
	if err != nil {
		fmt.Println(err) // one line per damaged device or file; res holds the rest
	}
	fmt.Println(len(tree.Devices), "PCI functions,", len(res.EFAs), "EFAs,", len(res.Inactive), "inactive")
	for _, d := range res.EFAs {
		dev := "-" // Verbs is nil where the kernel made no uverbs device
		if d.Verbs != nil {
			dev = fmt.Sprintf("%d:%d", d.Verbs.Major, d.Verbs.Minor)
		}
		fmt.Println(d.Name, d.PCI.Address, d.Generation, d.Verbs.DevicePath(), dev, d.Netdev)
		for _, p := range d.Ports {
			fmt.Printf("  port %d %s %g Gb/s\n", p.Number, p.State, p.RateGbps)
		}
	}
	// Output:
	// 33 PCI functions, 4 EFAs, 0 inactive
	// rdmap16s27 0000:10:1b.0 efa0 /dev/infiniband/uverbs0 231:192 ens32
	//   port 1 ACTIVE 100 Gb/s
	// rdmap32s27 0000:20:1b.0 efa0 /dev/infiniband/uverbs1 231:193 enp32s1
	//   port 1 ACTIVE 100 Gb/s
	// rdmap144s27 0000:90:1b.0 efa0 /dev/infiniband/uverbs2 231:194 enp144s1
	//   port 1 ACTIVE 100 Gb/s
	// rdmap160s27 0000:a0:1b.0 efa0 /dev/infiniband/uverbs3 231:195 enp160s1
	//   port 1 ACTIVE 100 Gb/s
}

// ExampleVerbs_DevicePath: an EFA without a uverbs device (ib_uverbs not
// loaded) has a nil Verbs, whose methods still answer, so that a caller
// can print every EFA without a check.
func ExampleVerbs_DevicePath() {
	v := &efa.Verbs{Name: "uverbs3", Major: 231, Minor: 195}
	fmt.Printf("%q %#x\n", v.DevicePath(), v.Dev())
	var none *efa.Verbs
	fmt.Printf("%q %#x\n", none.DevicePath(), none.Dev())
	// Output:
	// "/dev/infiniband/uverbs3" 0xe7c3
	// "" 0x0
}

// ExampleDevice_ReadCounters reads one EFA's hardware counters twice and
// prints what advanced in between, as a rate would be computed on a
// machine (here the bundled p5.48xlarge capture, whose counters are all 0:
// the second read finds nothing advanced). Counters are read apart from
// discovery, from the root the EFA was found in. A counter the hardware
// lacks is absent from the map, never 0: this capture's p5 EFAs (efa1)
// have no retransmit counters.
func ExampleDevice_ReadCounters() {
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs") // "/sys" on a machine
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	_, res, err := efa.Scan(root)
	if err != nil {
		log.Fatal(err)
	}
	d := res.EFAs[0]
	before, err := d.ReadCounters(root)
	if err != nil {
		log.Fatal(err)
	}
	after, err := d.ReadCounters(root) // a second later, on a machine
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Name, len(before.Device), "device counters,", len(before.Ports[1]), "on port 1")
	for _, name := range []string{"rx_bytes", "tx_bytes", "retrans_timeout_events"} {
		v, ok := after.Ports[1][name]
		if !ok {
			fmt.Println(name, "not exposed by this driver")
			continue
		}
		fmt.Println(name, v, "advanced by", v-before.Ports[1][name])
	}
	fmt.Println("no_completion_cmds", after.Device["no_completion_cmds"])
	// Output:
	// rdmap79s0 12 device counters, 17 on port 1
	// rx_bytes 0 advanced by 0
	// tx_bytes 0 advanced by 0
	// retrans_timeout_events not exposed by this driver
	// no_completion_cmds 0
}
