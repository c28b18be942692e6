package claims_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

// smallFS mounts a tmpfs of size bytes on a new directory, unmounted when
// the test ends; it needs root.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "efakit-test", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// fill writes a file that takes the rest of dir's file system.
func fill(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	require.NoError(t, f.Close())
	// A few bytes may be left in a partly used page: take them too.
	g, err := os.Create(filepath.Join(dir, "filler2"))
	require.NoError(t, err)
	for {
		if _, err := g.Write([]byte{0}); err != nil {
			break
		}
	}
	require.NoError(t, g.Close())
	return f.Name()
}

// listFiles lists the names in dir (the test's own filler files aside).
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "filler") {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	}))
	return out
}

// TestPrepareOnFullDisk: with the CDI directory's file system full, a
// prepare fails with an error that says so and what to do, leaves no file
// behind (no spec, no temporary file, no checkpoint entry), and the
// storage check says why prepares fail; once space returns, the same
// prepare works and the check clears.
func TestPrepareOnFullDisk(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: smallFS(t, "256k"), data: t.TempDir()}
	n := startOn(t, capture(t), d)
	filler := fill(t, d.cdi)

	c := claim("full", "f0000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	r := n.prepareOne(c)
	require.Error(t, r.Err)
	assert.Contains(t, r.Err.Error(), "no space left on device (the file system is full: free space; the kubelet retries the prepare)")
	assert.Empty(t, listFiles(t, d.cdi), "nothing half-written stays")
	st, err := checkpoint.NewStore(d.data).Load(bootA)
	require.NoError(t, err)
	assert.Empty(t, st.Claims, "the claim is not recorded")
	n.CheckStorage(context.Background())
	assert.Contains(t, n.StorageProblem(), d.cdi+" has ")
	assert.Contains(t, n.StorageProblem(), "bytes free (its file system is full)")

	require.NoError(t, os.Remove(filler))
	require.NoError(t, os.Remove(filepath.Join(d.cdi, "filler2")))
	require.NoError(t, n.prepareOne(c).Err, "the next prepare after space returns works")
	assert.Equal(t, []string{"/dev/infiniband/uverbs0 231:192"}, specNodesOf(t, n.files.CDI, c.UID))
	n.CheckStorage(context.Background())
	assert.Empty(t, n.StorageProblem())
}

// TestPrepareOnReadOnlyCDI: a read-only CDI directory fails a prepare with
// an error that says so, and the storage check names the directory.
func TestPrepareOnReadOnlyCDI(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: smallFS(t, "1m"), data: t.TempDir()}
	n := startOn(t, capture(t), d)
	out, err := exec.Command("mount", "-o", "remount,ro", d.cdi).CombinedOutput()
	require.NoError(t, err, "%s", out)

	r := n.prepareOne(claim("ro", "f0000000-0000-0000-0000-000000000002", "efa-0000-4f-00-0"))
	require.Error(t, r.Err)
	assert.Contains(t, r.Err.Error(), "read-only file system (the directory is read-only: make it writable; the kubelet retries the prepare)")
	n.CheckStorage(context.Background())
	assert.Equal(t, d.cdi+" is on a read-only file system", n.StorageProblem())
}
