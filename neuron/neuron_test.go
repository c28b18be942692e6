package neuron_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

func TestReadClassTrn1(t *testing.T) {
	t.Parallel()
	r, err := sysfs.Open("../testdata/sysfs/trn1.32xlarge.sysfs")
	require.NoError(t, err)
	class, err := neuron.ReadClass(sysfs.NewReader(r))
	require.NoError(t, err)
	require.Len(t, class, 16)
	assert.Equal(t, neuron.ClassDevice{Index: 0, CoreCount: 2, Connected: []int{12, 3, 4, 1}, ArchType: "NDv2", Instance: "Trn1", DeviceName: "Trainium1"}, class[0])
	assert.Equal(t, []int{11, 14, 3, 12}, class[15].Connected)
}

func TestTables(t *testing.T) {
	t.Parallel()
	for it, fam := range map[string]string{"trn1.32xlarge": "trn1", "trn1n.32xlarge": "trn1n", "trn2.48xlarge": "trn2", "trn2u.48xlarge": "trn2", "trn2e.48xlarge": "trn2", "trn3pd98.48xlarge": "trn3"} {
		tb, ok := neuron.TableFor(it)
		require.True(t, ok, it)
		assert.Equal(t, fam, tb.Family)
		assert.Len(t, tb.Indexes(), 16)
	}
	for _, it := range []string{"", "p5.48xlarge", "inf2.48xlarge", "trn"} {
		_, ok := neuron.TableFor(it)
		assert.False(t, ok, it)
	}
	tb, _ := neuron.TableFor("trn1.32xlarge")
	a, _ := pcie.ParseAddress("0000:10:19.0")
	assert.Equal(t, []int{12, 13}, tb.NeuronsOf(a))
	g, ok := tb.EFAGroups(a)
	require.True(t, ok)
	// shared/HARDWARE.md's known values for this EFA.
	assert.Equal(t, neuron.Groups{Group1: "0000:10:19.0", Group4: "178a9e264a26793e", Group8: "aa86c05423d6e8cd", Group16: "fb838249c99a6341"}, g)
	n, ok := tb.NeuronGroups(13)
	require.True(t, ok)
	assert.Equal(t, g, n)
	b, _ := pcie.ParseAddress("0000:10:1d.0")
	assert.Equal(t, 13, tb.IndexOf(b))
	// trn1n: one EFA per Neuron device.
	tn, _ := neuron.TableFor("trn1n.32xlarge")
	for _, i := range tn.Indexes() {
		assert.Len(t, tn.NeuronsOf(tn.NeuronEFA[i]), 1)
	}
	none, _ := pcie.ParseAddress("0000:ff:00.0")
	_, ok = tb.EFAGroups(none)
	assert.False(t, ok)
}

func TestParseConnected(t *testing.T) {
	t.Parallel()
	c, err := neuron.ParseConnected("12, 3, 4, 1")
	require.NoError(t, err)
	assert.Equal(t, []int{12, 3, 4, 1}, c)
	c, err = neuron.ParseConnected("")
	require.NoError(t, err)
	assert.Empty(t, c)
	for _, in := range []string{"a", "1,,2", "-1", "1, 99999"} {
		_, err := neuron.ParseConnected(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseConnected(f *testing.F) {
	f.Add("12, 3, 4, 1")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := neuron.ParseConnected(s)
		for _, x := range c {
			if err == nil && (x < 0 || x > 1023) {
				t.Fatalf("%q -> %v", s, c)
			}
		}
	})
}

// TestDamagedStaysUnknown: a core count or connection list that does not
// parse is reported and left unknown (0, nil), never the parser's partial
// or negative value.
func TestDamagedStaysUnknown(t *testing.T) {
	t.Parallel()
	d := neuron.ClassDir + "/neuron0/"
	for _, tc := range []struct{ file, value string }{
		{"core_count", "-5\n"},
		{"core_count", "two\n"},
		{"connected_devices", "1, x, 3\n"},
	} {
		t.Run(tc.file+"="+tc.value, func(t *testing.T) {
			files := map[string]string{"core_count": "2\n", "connected_devices": "1, 3\n"}
			files[tc.file] = tc.value
			entries := []sysfs.Entry{{Path: "devices", Kind: sysfs.KindDir}, {Path: "devices/virtual", Kind: sysfs.KindDir},
				{Path: neuron.ClassDir, Kind: sysfs.KindDir}, {Path: d[:len(d)-1], Kind: sysfs.KindDir}}
			for f, v := range files {
				entries = append(entries, sysfs.Entry{Path: d + f, Kind: sysfs.KindFile, Data: []byte(v)})
			}
			m, err := sysfs.NewMemFS(entries)
			require.NoError(t, err)
			class, err := neuron.ReadClass(sysfs.NewReader(m))
			require.Error(t, err)
			assert.Contains(t, err.Error(), d+tc.file)
			require.Len(t, class, 1)
			if tc.file == "core_count" {
				assert.Equal(t, 0, class[0].CoreCount, "unknown")
				assert.Equal(t, []int{1, 3}, class[0].Connected)
			} else {
				assert.Nil(t, class[0].Connected, "unknown")
				assert.Equal(t, 2, class[0].CoreCount)
			}
		})
	}
}
