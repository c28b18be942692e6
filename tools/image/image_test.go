package main

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImage builds the image, reads the OCI layout back, checks its config
// and runs the plugin binary taken out of its layer.
func TestImage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image")
	require.NoError(t, build(out, "test"))
	p, err := layout.FromPath(out)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	img, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "65532:65532", cf.Config.User, "non-root")
	assert.Equal(t, []string{"/usr/local/bin/efakit-plugin"}, cf.Config.Entrypoint)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	require.Len(t, cf.RootFS.DiffIDs, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	dir := t.TempDir()
	found := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		found[h.Name] = true
		f := filepath.Join(dir, filepath.Base(h.Name))
		w, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY, 0o755)
		require.NoError(t, err)
		_, err = io.Copy(w, tr)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	assert.True(t, found["usr/local/bin/efakit-plugin"])
	assert.True(t, found["usr/local/bin/efakit"])
	v, err := exec.Command(filepath.Join(dir, "efakit-plugin"), "--version").CombinedOutput()
	require.NoError(t, err, string(v))
	assert.Contains(t, string(v), "efakit-plugin test")
	v, err = exec.Command(filepath.Join(dir, "efakit"), "version").CombinedOutput()
	require.NoError(t, err, string(v))
	assert.Contains(t, string(v), "efakit test")
}
