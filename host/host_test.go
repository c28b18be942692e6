package host_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

func TestRead(t *testing.T) {
	t.Parallel()
	b := fakesys.New()
	b.Product("p5.48xlarge")
	b.NUMANodes(32, "0-47,96-143", "48-95,144-191")
	info, err := host.Read(sysread.New(b.FS()))
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

func TestReadMissing(t *testing.T) {
	t.Parallel()
	// No DMI, no NUMA: nothing to report, no error.
	info, err := host.Read(sysread.New(fakesys.New().FS()))
	require.NoError(t, err)
	assert.Equal(t, "", info.InstanceType)
	assert.Empty(t, info.NUMANodes)
}

// p5 is a capture with two NUMA nodes and an instance type.
const p5 = "../testdata/sysfs/p5.48xlarge.sysfs"

// capture returns the entries of the p5 capture.
func capture(t *testing.T) []sysfs.Entry {
	t.Helper()
	r, err := sysfs.Open(p5)
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

// TestDamagedStaysUnknown: the instance type and every attribute of a NUMA
// node, damaged in turn (garbage, or text that cannot be printed), are
// reported once, naming the node (or the host) and the file, and left
// unknown ("", nil, -1), never a partial value or the raw text; the other
// node, and the node's other attributes, are as without the damage.
func TestDamagedStaysUnknown(t *testing.T) {
	t.Parallel()
	base := capture(t)
	clean, err := host.Read(edited(t, base, func(*sysfs.Entry) {}))
	require.NoError(t, err)
	require.Len(t, clean.NUMANodes, 2)
	require.Equal(t, 1, clean.NUMANodes[1].Socket)
	node1 := "devices/system/node/node1/"
	pkg := "devices/system/cpu/cpu48/topology/physical_package_id" // node 1's first CPU
	for _, tc := range []struct {
		file, value string
		who         string // "node 1", or "" for the host
		unknown     func(i *host.Info)
	}{
		{sysattr.DMIProductName, "p5.48xlarge\nInstance type: trn1.32xlarge\n", "", func(i *host.Info) { i.InstanceType = "" }},
		{sysattr.DMIProductName, "p5.48xlarge\xff\n", "", func(i *host.Info) { i.InstanceType = "" }},
		// Without its CPUs, the node's socket is unknown too.
		{node1 + "cpulist", "48-x\n", "node 1", func(i *host.Info) { i.NUMANodes[1].CPUs, i.NUMANodes[1].Socket = nil, -1 }},
		{node1 + "distance", "32 ten\n", "node 1", func(i *host.Info) { i.NUMANodes[1].Distances = nil }},
		{node1 + "distance", "32 -10\n", "node 1", func(i *host.Info) { i.NUMANodes[1].Distances = nil }},
		{pkg, "x\n", "node 1", func(i *host.Info) { i.NUMANodes[1].Socket = -1 }},
		{pkg, "-3\n", "node 1", func(i *host.Info) { i.NUMANodes[1].Socket = -1 }},
	} {
		t.Run(tc.file+"="+strconv.Quote(tc.value), func(t *testing.T) {
			t.Parallel()
			want, err := host.Read(edited(t, base, func(*sysfs.Entry) {}))
			require.NoError(t, err)
			tc.unknown(want)
			got, err := host.Read(edited(t, base, func(e *sysfs.Entry) {
				if e.Path == tc.file {
					e.Data = []byte(tc.value)
				}
			}))
			require.Error(t, err)
			prefix := "host: "
			if tc.who != "" {
				prefix = "host " + tc.who + ": "
			}
			assert.Contains(t, err.Error(), prefix+tc.file+": ")
			var se *sysfs.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, sysfs.Error{Subsystem: "host", Device: tc.who, File: tc.file, Err: se.Err}, *se)
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
			assert.Equal(t, want, got)
		})
	}
}

// TestBadNodeNamesLeftOut: a node directory named node<something> that is
// not the kernel's node<ID> (a control character, a leading zero, an ID
// past MAX_NUMNODES) is reported, the name quoted, and left out; the other
// node is read.
func TestBadNodeNamesLeftOut(t *testing.T) {
	t.Parallel()
	base := capture(t)
	for _, name := range []string{"node1\n", "node\u00851", "node01", "node99999999999999999999", "node1024"} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			t.Parallel()
			want, err := host.Read(edited(t, base, func(*sysfs.Entry) {}))
			require.NoError(t, err)
			want.NUMANodes = want.NUMANodes[:1]
			got, err := host.Read(edited(t, base, func(e *sysfs.Entry) {
				e.Path = strings.Replace(e.Path, host.NodeDir+"/node1", host.NodeDir+"/"+name, 1)
			}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "host: "+host.NodeDir+": ")
			assert.Contains(t, err.Error(), strconv.Quote(name))
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
			assert.Equal(t, want, got)
			assert.Nil(t, got.Node(1))
		})
	}
}

func TestParseSocket(t *testing.T) {
	t.Parallel()
	v, err := host.ParseSocket("1")
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	for _, in := range []string{"", "-1", "x", "1 2"} {
		_, err := host.ParseSocket(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseSocket(f *testing.F) {
	f.Add("0")
	f.Add("-1")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := host.ParseSocket(s); err == nil && v < 0 {
			t.Fatalf("%q -> %d", s, v)
		}
	})
}

// FuzzParseNodeID: a node's ID is below 1024 and printed back as its name.
func FuzzParseNodeID(f *testing.F) {
	for _, s := range []string{"node0", "node1", "node01", "node1024", "online", "node"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok, err := host.ParseNodeID(s)
		if ok && (err != nil || id < 0 || id >= 1024 || "node"+strconv.Itoa(id) != s) {
			t.Fatalf("%q -> %d, %v", s, id, err)
		}
	})
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
