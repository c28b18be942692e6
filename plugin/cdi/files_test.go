package cdi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/efakit/efakit/plugin/cdi"
)

// TestWriteMetadata: the metadata spec written again resolves through a
// CDI cache to the read-only bind mount of the request's metadata file.
func TestWriteMetadata(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	host := "/var/lib/kubelet/plugins/dra.net/dra-device-metadata/ns_c/efa/metadata.json"
	ctr := "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/efa/dra.net-metadata.json"
	id, err := w.WriteMetadata(uid, "efa", host, ctr)
	require.NoError(t, err)
	assert.Equal(t, "dra.net/metadata="+uid+"_efa", id)
	assert.FileExists(t, filepath.Join(dir, "dra.net_metadata_"+uid+"_efa.json"))
	ok, err := w.MetadataExists(uid, "efa")
	require.NoError(t, err)
	assert.True(t, ok)

	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	dev := cache.GetDevice(id)
	require.NotNil(t, dev, "errors: %v", cache.GetErrors())
	require.Len(t, dev.ContainerEdits.Mounts, 1)
	m := dev.ContainerEdits.Mounts[0]
	assert.Equal(t, host, m.HostPath)
	assert.Equal(t, ctr, m.ContainerPath)
	assert.Equal(t, []string{"ro", "bind"}, m.Options)

	for _, bad := range [][4]string{{"../x", "efa", host, ctr}, {uid, "a/b", host, ctr}, {uid, "efa", "rel", ctr}, {uid, "Efa", host, ctr}} {
		_, err := w.WriteMetadata(bad[0], bad[1], bad[2], bad[3])
		assert.Error(t, err, "%q", bad)
	}
}

// TestList sorts the directory's files into the Writer's specs, the
// helper's metadata specs and temporary leftovers, and ignores the rest.
func TestList(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	other := "c0ffee00-0000-4000-8000-000000000000"
	_, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	_, err = w.WriteMetadata(other, "efas", "/h", "/c")
	require.NoError(t, err)
	for _, n := range []string{
		".dra.net-efa_" + uid + ".json.123.tmp",
		".dra.net_metadata_" + other + "_efas.json.9.tmp",
		"nvidia.com-gpu_x.json", "dra.net-efa_bad uid.json", "notes.txt",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
	}
	f, err := w.List()
	require.NoError(t, err)
	assert.Equal(t, []string{uid}, f.Specs)
	assert.Equal(t, map[string][]string{other: {"dra.net_metadata_" + other + "_efas.json"}}, f.Metadata)
	assert.Equal(t, []string{".dra.net-efa_" + uid + ".json.123.tmp", ".dra.net_metadata_" + other + "_efas.json.9.tmp"}, f.Temp)
	for _, n := range f.Temp {
		require.NoError(t, w.RemoveName(n))
	}
	require.NoError(t, w.RemoveName(f.Temp[0]), "a missing file is no error")
	for _, bad := range []string{"", ".", "..", "a/b", "../x"} {
		assert.Error(t, w.RemoveName(bad))
	}
	f, err = w.List()
	require.NoError(t, err)
	assert.Empty(t, f.Temp)

	missing, err := cdi.NewWriter(filepath.Join(dir, "none"), "dra.net")
	require.NoError(t, err)
	f, err = missing.List()
	require.NoError(t, err)
	assert.Empty(t, f.Specs)
}

// TestNoFsync: writing a claim's spec, writing it again and writing its
// metadata spec make no fsync (see the Writer's specDurability); before,
// each made two, the file's and the directory's.
func TestNoFsync(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	var synced []string
	w.Sync = func(f *os.File) error { synced = append(synced, f.Name()); return nil }
	_, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	_, err = w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas[:2]}))
	require.NoError(t, err)
	_, err = w.WriteMetadata(uid, "efa", "/var/lib/kubelet/plugins/dra.net/m.json", "/var/run/m.json")
	require.NoError(t, err)
	assert.Empty(t, synced)
	spec, err := w.Load(uid)
	require.NoError(t, err)
	assert.Len(t, spec.Devices[0].ContainerEdits.DeviceNodes, 2, "the spec written last")
	assert.Len(t, listDir(t, dir), 2)
}
