package snapshot_test

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/snapshot"
	"github.com/efakit/efakit/sysfs"
)

type view struct {
	Name, PCI, Root, Uverbs, Netdev, Driver string
	NUMA                                    int
	Bridges                                 int
}

func scan(t *testing.T, fsys fs.ReadLinkFS) ([]view, int) {
	t.Helper()
	tree, res, err := efa.Scan(fsys)
	require.NoError(t, err)
	var out []view
	for _, d := range res.EFAs {
		out = append(out, view{d.Name, d.PCI.Address.String(), d.PCI.Root, d.Verbs.Name, d.Netdev, d.PCI.Driver, d.PCI.NUMANode, len(d.PCI.Bridges())})
	}
	return out, len(tree.Devices)
}

// TestSnapshotReplays captures every fixture as if it were a live /sys and
// checks that the capture gives the same discovery, with the host's
// identifiers gone, and that capturing a capture changes nothing.
func TestSnapshotReplays(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(p)
			require.NoError(t, err)
			want, wantPCI := scan(t, root)

			snap, err := snapshot.Take(root, snapshot.Options{})
			require.NoError(t, err)
			m, err := sysfs.NewMemFS(snap.Entries)
			require.NoError(t, err)
			got, gotPCI := scan(t, m)
			assert.Equal(t, want, got)
			assert.Equal(t, wantPCI, gotPCI)

			var text bytes.Buffer
			require.NoError(t, sysfs.WriteCapture(&text, nil, snap.Entries))
			orig := root.ReadLinkFS.(*sysfs.MemFS)
			for _, e := range orig.Entries() {
				if strings.HasSuffix(e.Path, "/address") && strings.Contains(e.Path, "/net/") {
					mac := strings.TrimSpace(string(e.Data))
					assert.NotContains(t, text.String(), mac, "MAC %s scrubbed", mac)
				}
				if strings.HasSuffix(e.Path, "/node_guid") {
					g := strings.TrimSpace(string(e.Data))
					if strings.Trim(g, "0:") != "" {
						assert.NotContains(t, text.String(), g, "GUID %s scrubbed", g)
					}
				}
			}
			// A snapshot of the snapshot is the same snapshot.
			again, err := snapshot.Take(m, snapshot.Options{})
			require.NoError(t, err)
			var text2 bytes.Buffer
			require.NoError(t, sysfs.WriteCapture(&text2, nil, again.Entries))
			assert.Equal(t, text.String(), text2.String())
			assert.Less(t, text.Len(), 2<<20)
		})
	}
}
