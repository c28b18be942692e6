package seeds_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fixturegen/seeds"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestSeeds: each seed is a v1 capture without an end marker that reads
// without an error and holds what Captures says.
func TestSeeds(t *testing.T) {
	caps, err := seeds.Captures()
	require.NoError(t, err)
	want := map[string]struct {
		gpus, neurons, efas, inactive int
		closest                       map[string][]string
	}{
		"flat":   {1, 0, 1, 0, map[string][]string{"efa_0": {"GPU0"}}},
		"switch": {2, 0, 2, 1, map[string][]string{"rdmap71s0": {"GPU0"}, "rdmap85s0": {"GPU1"}}},
		"trn1":   {0, 2, 2, 0, map[string][]string{"NEURON0": {"rdmap16s26"}, "NEURON1": {"rdmap16s26"}, "rdmap16s26": {"NEURON0", "NEURON1"}}},
	}
	require.Len(t, caps, len(want))
	for name, c := range caps {
		t.Run(name, func(t *testing.T) {
			assert.True(t, strings.HasPrefix(c, "efakit-sysfs-capture v1\n"))
			assert.NotContains(t, c, "\nend ")
			assert.Less(t, len(c), 16<<10, "small, so the fuzzer runs fast")
			es, err := sysfs.ParseCapture(strings.NewReader(c))
			require.NoError(t, err)
			m, err := sysfs.NewMemFS(es)
			require.NoError(t, err)
			topo, err := topology.Scan(m)
			require.NoError(t, err)
			w := want[name]
			assert.Len(t, topo.Of(topology.KindGPU), w.gpus)
			assert.Len(t, topo.Of(topology.KindNeuron), w.neurons)
			assert.Len(t, topo.Of(topology.KindEFA), w.efas)
			assert.Len(t, topo.InactiveEFAs, w.inactive)
			for d, cl := range w.closest {
				var got []string
				for _, o := range topo.Closest(topo.ByName(d)) {
					got = append(got, o.Name)
				}
				assert.Equal(t, cl, got, d)
			}
			for _, e := range topo.Of(topology.KindEFA) {
				assert.NotNil(t, e.EFA.Verbs, e.Name)
			}
			if name == "flat" {
				assert.Equal(t, "ens5", topo.ByName("efa_0").EFA.Netdev, "the ENA whose MAC makes the GID")
			}
		})
	}
}
