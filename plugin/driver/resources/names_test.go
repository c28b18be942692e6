package resources_test

import (
	"io/fs"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestBadNamesNeverPublished: an RDMA device, uverbs device or ENA
// interface whose name holds a control character or invalid UTF-8 is left
// out by the library (efa's TestBadNamesLeftOut); nor does any device name
// or attribute of the slices the plugin would publish hold it, in every
// group mode, and every string there is printable. The other EFAs are
// published. Read from memory and from disk, where such names are legal.
func TestBadNamesNeverPublished(t *testing.T) {
	t.Parallel()
	root, err := sysfs.Open("../../../testdata/sysfs/p4d.24xlarge.sysfs")
	require.NoError(t, err)
	entries := root.ReadLinkFS.(*sysfs.MemFS).Entries()
	for _, tc := range []struct{ old, new string }{
		{"rdmap16s27", "rdmap16s27\nrdmap99s0  0000:99:00.0"},
		{"rdmap16s27", "rdmap16s27\xff"},
		{"rdmap16s27", "rdmap16\ts27"},
		{"rdmap16s27", "rdmap16s27\x7f"},
		{"rdmap16s27", "rdmap16s27\u0085x"},
		{"uverbs0", "uverbs0\nuverbs9"},
		{"ens32", "ens\n32"},
		{"ens32", "ens32\xc3"},
	} {
		t.Run(tc.new, func(t *testing.T) {
			t.Parallel()
			bad, n := fakesys.Renamed(entries, tc.old, tc.new)
			require.NotZero(t, n)
			roots := map[string]fs.ReadLinkFS{}
			if utf8.ValidString(tc.new) {
				mem, err := sysfs.NewMemFS(bad)
				require.NoError(t, err)
				roots["memory"] = mem
			}
			dir := filepath.Join(t.TempDir(), "sys")
			require.NoError(t, fakesys.WriteTree(dir, bad))
			disk, err := sysfs.Open(dir)
			require.NoError(t, err)
			defer disk.Close()
			roots["disk"] = disk
			for where, fsys := range roots {
				topo, err := topology.Scan(fsys)
				require.Error(t, err, where)
				for _, mode := range []resources.GroupMode{resources.GroupsNone, resources.GroupsMixed} {
					res, _ := resources.Published(topo, resources.Config{NodeName: "node-1", Groups: mode})
					n := 0
					for _, s := range res.Slices {
						for _, d := range s.Devices {
							n++
							assert.NotContains(t, d.Name, tc.new, where)
							for name, a := range d.Attributes {
								var vals []string
								if a.StringValue != nil {
									vals = append(vals, *a.StringValue)
								}
								vals = append(vals, a.StringValues...)
								for _, v := range vals {
									assert.NotContains(t, v, tc.new, "%s: attribute %s", where, name)
									assert.NoError(t, names.CheckText(v), "%s: attribute %s", where, name)
								}
							}
						}
					}
					assert.NotZero(t, n, "%s: the other EFAs are published", where)
				}
			}
		})
	}
}
