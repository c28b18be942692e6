package sysfs_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestNoFileReadTwice proves that the whole topology (PCI tree, EFAs, host,
// Neuron class devices) of every fixture, unpacked on disk and read through
// the openat2 root that production uses, reads each file, directory and
// link once and describes each entry once. It counts in the root itself,
// so every question that reaches the file system is seen.
func TestNoFileReadTwice(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := unpackedRoot(t, path)

			// Opening a file and listing a directory both read it;
			// Lstat and Stat both describe an entry.
			class := map[string]string{"open": "read", "readdir": "read", "readlink": "readlink", "lstat": "describe", "stat": "describe"}
			var mu sync.Mutex
			asked := map[string][]string{}
			if !sysfs.AskDirFS(root, func(op, name string) {
				mu.Lock()
				defer mu.Unlock()
				c, ok := class[op]
				if !ok {
					c = op
				}
				asked[c+" "+name] = append(asked[c+" "+name], op)
			}) {
				t.Skip("openat2 is missing here: OpenDir fell back to os.Root, not the production path")
			}
			topo, err := topology.Scan(root)
			require.NoError(t, err)
			reads := 0
			for k, ops := range asked {
				assert.Len(t, ops, 1, "%s: %v", k, ops)
				if ops[0] == "open" || ops[0] == "readdir" {
					reads++
				}
			}
			assert.NotZero(t, reads)
			t.Logf("%d devices, %d reads, %d questions", len(topo.Devices), reads, len(asked))
		})
	}
}

// unpackedRoot unpacks the capture at path into a temporary directory and
// opens it as production does; it is closed when the test ends.
func unpackedRoot(t *testing.T, path string) *sysfs.Root {
	t.Helper()
	mem, err := sysfs.OpenCapture(path)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "sys")
	require.NoError(t, sysfs.WriteDir(dir, mem.ReadLinkFS.(*sysfs.MemFS).Entries()))
	root, err := sysfs.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	return root
}
