package pciids_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/pciids"
)

func TestNamesFromDatabase(t *testing.T) {
	t.Parallel()
	n := pciids.LoadNamesFrom("../../testdata/pci.ids")
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237), "from the database")
	assert.Equal(t, "Intel Corporation", n.Vendor(0x8086))
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa1))
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa3), "built in where the database is older")
	assert.Equal(t, "", n.Device(0x1234, 0x5678))
	assert.NoError(t, n.Err())
}

func TestNamesBuiltIn(t *testing.T) {
	t.Parallel()
	var n *pciids.Names // built-in names only
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa0))
	assert.Equal(t, "Amazon.com, Inc.", n.Vendor(0x1d0f))
	assert.Equal(t, "GA100 [A100 SXM4 40GB]", n.Device(0x10de, 0x20b0))
	assert.Equal(t, "", n.Device(0x8086, 0x1237))
	assert.NoError(t, n.Err())
	assert.Equal(t, "Amazon.com, Inc.", pciids.BuiltinVendor(0x1d0f))
	assert.Equal(t, "", pciids.BuiltinVendor(0x8086))
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", pciids.BuiltinDevice(0x1d0f, 0xefa3))

	missing := pciids.LoadNamesFrom("/nonexistent/pci.ids")
	assert.NoError(t, missing.Err(), "not read before a name needs it")
	assert.Equal(t, "", missing.Device(0x8086, 0x1237))
	assert.ErrorContains(t, missing.Err(), "/nonexistent/pci.ids")
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", missing.Device(0x1d0f, 0xefa0), "built-in names still answer")
}

func TestLoadNamesEnv(t *testing.T) {
	t.Setenv("PCIDB_PATH", "../../testdata/pci.ids")
	t.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "1") // must not fetch anyway
	n := pciids.LoadNames()
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237))
	assert.NoError(t, n.Err())
}

// TestNamesReadWhenNeeded: the database is read when a name the built-in
// table lacks is first asked for, not when Names is made, and only once.
// The file does not exist while built-in names are asked for, appears
// before the first unknown name, and changes after it: the answers show
// when it was read.
func TestNamesReadWhenNeeded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pci.ids")
	n := pciids.LoadNamesFrom(path)
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa1))
	assert.Equal(t, "NVIDIA Corporation", n.Vendor(0x10de))
	assert.NoError(t, n.Err(), "built-in names read no database")

	require.NoError(t, os.WriteFile(path, []byte("8086  Intel Corporation\n\t1237  440FX - 82441FX PMC [Natoma]\n"), 0o644))
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237), "read at the first unknown name")

	require.NoError(t, os.WriteFile(path, []byte("8086  Changed Corporation\n\t1237  Changed\n"), 0o644))
	assert.Equal(t, "Intel Corporation", n.Vendor(0x8086), "read once")
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237))
	assert.NoError(t, n.Err())
}
