package efa_test

import (
	"os"
	"path/filepath"
	"testing"
)

// liveRDMAEFAs lists this machine's EFAs apart from efakit's readers: the
// RDMA devices of /sys/class/infiniband whose PCI function is bound to the
// efa driver, read through the os package (bench's TestRdmamapSeesSameEFAs
// checks the same against Mellanox/rdmamap).
func liveRDMAEFAs(t *testing.T) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir("/sys/class/infiniband")
	for _, e := range ents {
		drv, err := os.Readlink(filepath.Join("/sys/class/infiniband", e.Name(), "device", "driver"))
		if err == nil && filepath.Base(drv) == "efa" {
			out = append(out, e.Name())
		}
	}
	return out
}
