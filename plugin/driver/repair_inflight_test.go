package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/sysfs"
)

// TestRepairLeavesWritesInFlight: a repair while the plugin runs (the CDI
// watch saw a spec missing) writes lost specs back and removes nothing.
// Without POD_UID the kubelet helper takes no lock around its calls, so a
// temporary file in the CDI directory may be the helper writing a claim's
// metadata spec right after the checkpoint; the repair removed it, and
// that prepare failed (seen in TestKubeletPrepareUnprepare on a loaded
// machine). Leftovers are removed at the next start.
func TestRepairLeavesWritesInFlight(t *testing.T) {
	t.Parallel()
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	p, w := startPlugin(t, root, d)
	kept := claim("kept", "k7777777-7777-7777-7777-777777777777", "efa-0000-4f-00-0")
	require.NoError(t, prepareOne(t, p, kept).Err)
	inflight := filepath.Join(d.cdi, ".dra.net_metadata_"+string(kept.UID)+"_efa.json.12345.tmp")
	require.NoError(t, os.WriteFile(inflight, []byte("{}"), 0o644))
	path, err := w.SpecPath(string(kept.UID))
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))

	require.NoError(t, p.RepairSpecs(context.Background()))
	assert.FileExists(t, path, "the lost spec written back")
	assert.FileExists(t, inflight, "a write in flight left alone")

	// A start removes what an interrupted write left.
	_, _ = startPlugin(t, root, d)
	assert.NoFileExists(t, inflight)
	assert.FileExists(t, path)
}
