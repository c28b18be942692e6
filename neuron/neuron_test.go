package neuron_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/neuron"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

func TestReadClassTrn1(t *testing.T) {
	t.Parallel()
	r, err := sysfs.Open("../testdata/sysfs/trn1.32xlarge.sysfs")
	require.NoError(t, err)
	class, err := neuron.ReadClass(sysread.New(r))
	require.NoError(t, err)
	require.Len(t, class, 16)
	assert.Equal(t, neuron.ClassDevice{Index: 0, CoreCount: 2, Connected: []int{12, 3, 4, 1}, ArchType: "NDv2", Instance: "Trn1", DeviceName: "Trainium1"}, class[0])
	assert.Equal(t, []int{11, 14, 3, 12}, class[15].Connected)

	// Only the indexes, as the topology asks: nothing else is filled in.
	only, err := neuron.ReadClass(sysread.NewLean(r, sysread.Lean{Neuron: sysread.NeuronConnected}))
	require.NoError(t, err)
	require.Len(t, only, 16)
	assert.Equal(t, neuron.ClassDevice{Index: 0, Connected: []int{12, 3, 4, 1}}, only[0])
}

func TestTables(t *testing.T) {
	t.Parallel()
	for it, fam := range map[string]string{"trn1.32xlarge": "trn1", "trn1n.32xlarge": "trn1n", "trn2.48xlarge": "trn2", "trn2u.48xlarge": "trn2", "trn2e.48xlarge": "trn2", "trn3pd98.48xlarge": "trn3", "trn3pds.48xlarge": "trn3"} {
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
	// docs/hardware.md's known values for this EFA.
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

// trn1 is a capture with sixteen class devices.
const trn1 = "../testdata/sysfs/trn1.32xlarge.sysfs"

// capture returns the entries of the trn1 capture.
func capture(t *testing.T) []sysfs.Entry {
	t.Helper()
	r, err := sysfs.Open(trn1)
	require.NoError(t, err)
	return r.ReadLinkFS.(*sysfs.MemFS).Entries()
}

// edited returns the capture's entries with edit applied to each.
func edited(t *testing.T, base []sysfs.Entry, edit func(e *sysfs.Entry)) *sysread.Reader {
	t.Helper()
	var es []sysfs.Entry
	for _, e := range base {
		edit(&e)
		es = append(es, e)
	}
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	return sysread.New(m)
}

func cleanClass(t *testing.T, base []sysfs.Entry) []neuron.ClassDevice {
	t.Helper()
	class, err := neuron.ReadClass(edited(t, base, func(*sysfs.Entry) {}))
	require.NoError(t, err)
	require.Len(t, class, 16)
	return class
}

// TestDamagedStaysUnknown: every attribute of a class device, damaged in
// turn (garbage, or text that cannot be printed), is reported once, naming
// the device and the file, and left unknown (0, nil, ""), never the
// parser's partial or negative value or the raw text; the other devices,
// and the device's other attributes, are as without the damage.
func TestDamagedStaysUnknown(t *testing.T) {
	t.Parallel()
	base := capture(t)
	dir := sysattr.NeuronClassDir + "/neuron3/"
	for _, tc := range []struct {
		file, value string
		unknown     func(d *neuron.ClassDevice) // sets the field to its unknown value
	}{
		{"core_count", "-5\n", func(d *neuron.ClassDevice) { d.CoreCount = 0 }},
		{"core_count", "two\n", func(d *neuron.ClassDevice) { d.CoreCount = 0 }},
		{"connected_devices", "1, x, 3\n", func(d *neuron.ClassDevice) { d.Connected = nil }},
		{"info/architecture/arch_type", "ND\nv2\n", func(d *neuron.ClassDevice) { d.ArchType = "" }},
		{"info/architecture/instance_type", "Trn1\x1b[0m\n", func(d *neuron.ClassDevice) { d.Instance = "" }},
		{"info/architecture/device_name", "Train\x7fium1\n", func(d *neuron.ClassDevice) { d.DeviceName = "" }},
	} {
		t.Run(tc.file+"="+strconv.Quote(tc.value), func(t *testing.T) {
			t.Parallel()
			want := cleanClass(t, base)
			tc.unknown(&want[3])
			class, err := neuron.ReadClass(edited(t, base, func(e *sysfs.Entry) {
				if e.Path == dir+tc.file {
					e.Data = []byte(tc.value)
				}
			}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "neuron3: "+dir+tc.file+": ")
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
			assert.Equal(t, want, class)
		})
	}
}

// TestBadClassNamesLeftOut: a class device whose name is not the driver's
// neuron<N> (a control character, a leading zero, an index past 1023) is
// reported, the name quoted, and left out; the others are read.
func TestBadClassNamesLeftOut(t *testing.T) {
	t.Parallel()
	base := capture(t)
	for _, name := range []string{"neuron3\n", "neuron\u00853", "neuron03", "neuron+3", "neuron99999999999999999999", "\tneuron3"} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			t.Parallel()
			want := slices.Delete(cleanClass(t, base), 3, 4)
			class, err := neuron.ReadClass(edited(t, base, func(e *sysfs.Entry) {
				e.Path = strings.Replace(e.Path, sysattr.NeuronClassDir+"/neuron3", sysattr.NeuronClassDir+"/"+name, 1)
			}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "neuron: "+sysattr.NeuronClassDir+": ")
			assert.Contains(t, err.Error(), strconv.Quote(name))
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
			assert.Equal(t, want, class)
		})
	}
}

func TestParseCoreCount(t *testing.T) {
	t.Parallel()
	c, err := neuron.ParseCoreCount("2")
	require.NoError(t, err)
	assert.Equal(t, 2, c)
	for _, in := range []string{"", "-1", "two", "1.5", "99999999999999999999"} {
		_, err := neuron.ParseCoreCount(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseCoreCount(f *testing.F) {
	f.Add("2")
	f.Add("-1")
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := neuron.ParseCoreCount(s); err == nil && c < 0 {
			t.Fatalf("%q -> %d", s, c)
		}
	})
}

// FuzzParseIndex: a class device's index is 0-1023 and printed back as its
// name.
func FuzzParseIndex(f *testing.F) {
	for _, s := range []string{"neuron0", "neuron15", "neuron01", "neuron+1", "neuron", "power"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := neuron.ParseIndex(s)
		if ok && (n < 0 || n > 1023 || "neuron"+strconv.Itoa(n) != s) {
			t.Fatalf("%q -> %d", s, n)
		}
	})
}
