package efa_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/Mellanox/rdmamap"
)

// liveRDMAEFAs lists this machine's EFAs independently of efakit: the RDMA
// devices Mellanox/rdmamap finds in /sys/class/infiniband whose PCI
// function is bound to the efa driver.
func liveRDMAEFAs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dev := range rdmamap.GetRdmaDeviceList() {
		drv, err := os.Readlink(filepath.Join(rdmamap.RdmaClassDir, dev, "device", "driver"))
		if err == nil && filepath.Base(drv) == "efa" {
			out = append(out, dev)
		}
	}
	return out
}
