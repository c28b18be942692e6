package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestStandardAttributesMatchDeviceattribute computes every device's
// standard attributes with k8s.io/dynamic-resource-allocation/deviceattribute
// on the same tree: cross-driver matchAttribute needs identical strings,
// and these are what the plugin publishes.
func TestStandardAttributesMatchDeviceattribute(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "../../..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(path)
			require.NoError(t, err)
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			withFS := deviceattribute.WithFS(root)
			checked := 0
			for _, d := range topo.Devices {
				got, ok := topo.StandardAttributes(d)
				if !ok {
					continue
				}
				bdf := d.PCI.Address.String()
				rootAttr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(bdf, withFS)
				require.NoError(t, err, bdf)
				assert.Equal(t, *rootAttr.Value.StringValue, got.PCIeRoot, bdf)
				busAttr, err := deviceattribute.GetPCIBusIDAttribute(bdf)
				require.NoError(t, err)
				assert.Equal(t, *busAttr.Value.StringValue, got.PCIBusID, bdf)
				scalar, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(bdf, deviceattribute.ScalarAttribute, withFS)
				list, lerr := deviceattribute.GetNUMANodeAttributeByPCIBusID(bdf, deviceattribute.ListAttribute, withFS)
				if got.NUMANode == nil {
					assert.Error(t, err, "%s: numa_node -1 publishes no numaNode", bdf)
					assert.Error(t, lerr)
				} else {
					require.NoError(t, err, bdf)
					assert.Equal(t, int64(*got.NUMANode), *scalar.Value.IntValue, bdf)
					require.NoError(t, lerr, bdf)
					var want []int
					for _, v := range list.Value.IntValues {
						want = append(want, int(v))
					}
					assert.Equal(t, want, got.NUMANodes, bdf)
				}
				checked++
			}
			t.Logf("%d devices checked", checked)
		})
	}
}
