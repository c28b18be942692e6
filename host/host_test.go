package host_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/sysfs"
)

func TestRead(t *testing.T) {
	t.Parallel()
	b := fakesys.New()
	b.Product("p5.48xlarge")
	b.NUMANodes(32, "0-47,96-143", "48-95,144-191")
	info, err := host.Read(sysfs.NewReader(b.FS()))
	require.NoError(t, err)
	assert.Equal(t, "p5.48xlarge", info.InstanceType)
	require.Len(t, info.NUMANodes, 2)
	assert.Equal(t, []int{32, 10}, info.NUMANodes[1].Distances)
	assert.Equal(t, 1, info.NUMANodes[1].Socket)
	assert.Equal(t, "48-95,144-191", info.NUMANodes[1].CPUs.String())
	assert.Equal(t, 32, info.Distance(0, 1))
	assert.Equal(t, -1, info.Distance(0, 5))
	assert.Nil(t, info.Node(7))
}

func TestReadMissingAndDamaged(t *testing.T) {
	t.Parallel()
	// No DMI, no NUMA: nothing to report, no error.
	info, err := host.Read(sysfs.NewReader(fakesys.New().FS()))
	require.NoError(t, err)
	assert.Equal(t, "", info.InstanceType)
	assert.Empty(t, info.NUMANodes)

	b := fakesys.New()
	b.NUMANodes(21, "0-1", "2-3")
	b.Attr("devices/system/node/node1/distance", "21 ten")
	b.Attr("devices/system/cpu/cpu0/topology/physical_package_id", "x")
	info, err = host.Read(sysfs.NewReader(b.FS()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node 1: devices/system/node/node1/distance")
	assert.Contains(t, err.Error(), "devices/system/cpu/cpu0/topology/physical_package_id")
	require.Len(t, info.NUMANodes, 2, "the damaged node is still listed")
	assert.Equal(t, "0-1", info.NUMANodes[0].CPUs.String())
	assert.Equal(t, -1, info.NUMANodes[0].Socket)
}

func TestParseDistances(t *testing.T) {
	t.Parallel()
	d, err := host.ParseDistances("10 21 21 32\n")
	require.NoError(t, err)
	assert.Equal(t, []int{10, 21, 21, 32}, d)
	for _, in := range []string{"", "10 x", "-1", "256"} {
		_, err := host.ParseDistances(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseDistances(f *testing.F) {
	f.Add("10 32")
	f.Add("10")
	f.Add("x")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := host.ParseDistances(s)
		if err == nil && len(d) == 0 {
			t.Fatalf("%q: empty row accepted", s)
		}
	})
}
