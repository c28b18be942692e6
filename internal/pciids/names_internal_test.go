package pciids

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jaypipes/pcidb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamesOpenOnce: names the built-in table has never open the database;
// many goroutines asking for unknown names at once open it once.
func TestNamesOpenOnce(t *testing.T) {
	t.Parallel()
	noFetch := false
	db, err := pcidb.New(&pcidb.WithOption{EnableNetworkFetch: &noFetch}, pcidb.WithPath("../../testdata/pci.ids"))
	require.NoError(t, err)
	var opens atomic.Int32
	n := newNames(func() (*pcidb.DB, error) {
		opens.Add(1)
		return db, nil
	})
	for id := range builtinDevices {
		assert.NotEmpty(t, n.Device(id[0], id[1]))
		assert.NotEmpty(t, n.Vendor(id[0]))
	}
	assert.Zero(t, opens.Load(), "built-in names opened the database")

	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			assert.Equal(t, "440FX - 82441FX PMC [Natoma]", n.Device(0x8086, 0x1237))
			assert.Equal(t, "Intel Corporation", n.Vendor(0x8086))
			assert.Equal(t, "", n.Device(0x1234, 0x5678))
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), opens.Load())
}
