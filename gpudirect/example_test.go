package gpudirect_test

import (
	"fmt"
	"log"
	"os"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// ExampleJudge judges the P6e pair of testdata/gpudirect on the R595
// driver: blocked by the NVIDIA driver's topology check. On a machine,
// pass os.DirFS("/sys") and os.DirFS("/proc").
func ExampleJudge() {
	root, err := sysfs.Open("../testdata/gpudirect/p6e-gb300r-r595.sysfs")
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		log.Fatal(err)
	}
	pairs, _, err := gpudirect.Judge(root, topo, os.DirFS("../testdata/gpudirect/p6e-gb300r-r595.proc"))
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range pairs {
		fmt.Println(p.GPU.Name, p.EFA.Name, p.Link, p.Status)
		for _, x := range p.Paths {
			for _, f := range x.Findings {
				if f.Status != gpudirect.Ready {
					fmt.Println(" ", x.Method, f.Check, f.Status)
				}
			}
		}
	}
	// Output:
	// GPU0 rdmap151s0 NODE blocked
	//   dma-buf nvidia-topology-check blocked
	//   peer-memory efa-peer-memory blocked
}
