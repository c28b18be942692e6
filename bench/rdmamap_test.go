package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/Mellanox/rdmamap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
)

// TestRdmamapSeesSameEFAs reads this machine's own /sys: the EFAs efakit
// finds are the RDMA devices Mellanox/rdmamap lists (it reads the fixed
// path /sys/class/infiniband, so only the live tree) whose PCI function is
// bound to the efa driver.
func TestRdmamapSeesSameEFAs(t *testing.T) {
	var want []string
	for _, dev := range rdmamap.GetRdmaDeviceList() {
		drv, err := os.Readlink(filepath.Join(rdmamap.RdmaClassDir, dev, "device", "driver"))
		if err == nil && filepath.Base(drv) == "efa" {
			want = append(want, dev)
		}
	}
	root, err := sysfs.Open("/sys")
	require.NoError(t, err)
	defer root.Close()
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	var got []string
	for _, d := range res.EFAs {
		got = append(got, d.Name)
	}
	assert.ElementsMatch(t, want, got)
	t.Logf("rdmamap lists %d RDMA devices; %d EFAs", len(rdmamap.GetRdmaDeviceList()), len(got))
}
