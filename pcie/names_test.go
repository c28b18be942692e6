package pcie_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/pcie"
)

func TestNamesFromDatabase(t *testing.T) {
	t.Parallel()
	n, err := pcie.LoadNamesFrom("../testdata/pci.ids")
	require.NoError(t, err)
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237), "from the database")
	assert.Equal(t, "Intel Corporation", n.Vendor(0x8086))
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa1))
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa3), "built in where the database is older")
	assert.Equal(t, "", n.Device(0x1234, 0x5678))
}

func TestNamesBuiltIn(t *testing.T) {
	t.Parallel()
	var n *pcie.Names // what LoadNames gives without a database
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", n.Device(0x1d0f, 0xefa0))
	assert.Equal(t, "Amazon.com, Inc.", n.Vendor(0x1d0f))
	assert.Equal(t, "GA100 [A100 SXM4 40GB]", n.Device(0x10de, 0x20b0))
	assert.Equal(t, "", n.Device(0x8086, 0x1237))
	_, err := pcie.LoadNamesFrom("/nonexistent/pci.ids")
	assert.Error(t, err)
}

func TestLoadNamesEnv(t *testing.T) {
	t.Setenv("PCIDB_PATH", "../testdata/pci.ids")
	t.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "1") // must not fetch anyway
	n, err := pcie.LoadNames()
	require.NoError(t, err)
	assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237))
}
