package sysfs_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
)

// tree is a small sysfs with every kind of link the Reader must handle.
func tree() []sysfs.Entry {
	f := func(p, d string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(d)} }
	l := func(p, t string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: t} }
	return []sysfs.Entry{
		f("devices/pci0000:44/0000:44:00.0/vendor", "0x1d0f\n"),
		f("devices/pci0000:44/0000:44:00.0/core_count", "8"),
		{Path: "devices/pci0000:44/0000:44:00.0/remove", Kind: sysfs.KindFile, Mode: 0o200},
		{Path: "devices/system/node", Kind: sysfs.KindDir},
		l("bus/pci/devices/0000:44:00.0", "../../../devices/pci0000:44/0000:44:00.0"),
		l("bus/pci/drivers/efa/0000:44:00.0", "../../../../devices/pci0000:44/0000:44:00.0"),
		l("class/chain/a", "b"),
		l("class/chain/b", "../../bus/pci/devices/0000:44:00.0"),
		l("class/loop/a", "b"),
		l("class/loop/b", "a"),
		l("class/out", "../../etc"),
		l("class/abs", "/etc/passwd"),
		l("class/dangling", "../devices/nothing"),
		f("big", strings.Repeat("x", sysfs.MaxFileSize+1)),
		f("exact", strings.Repeat("x", sysfs.MaxFileSize)),
	}
}

// roots returns the tree as each kind of root: in memory, and unpacked on
// disk behind openat2 and behind the os.Root fallback. All must behave the
// same.
func roots(t *testing.T, es []sysfs.Entry) map[string]fs.ReadLinkFS {
	t.Helper()
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "sys")
	unpack(t, dir, es)
	// A file outside the root that an escaping link could reach.
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(dir), "secret"), []byte("no"), 0o644))
	d, err := sysfs.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	o, err := sysfs.OpenDirFallback(dir)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	return map[string]fs.ReadLinkFS{"mem": m, "dir": d, "os.Root": o}
}

func TestReaderResolve(t *testing.T) {
	t.Parallel()
	for kind, fsys := range roots(t, tree()) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := sysread.New(fsys)
			for _, tc := range []struct {
				name, want string
				err        error
			}{
				{"bus/pci/devices/0000:44:00.0", "devices/pci0000:44/0000:44:00.0", nil},
				{"bus/pci/devices/0000:44:00.0/vendor", "devices/pci0000:44/0000:44:00.0/vendor", nil},
				{"class/chain/a", "devices/pci0000:44/0000:44:00.0", nil},
				{"bus/pci/drivers/efa/0000:44:00.0/vendor", "devices/pci0000:44/0000:44:00.0/vendor", nil},
				{"class/loop/a", "", sysfs.ErrLinkLoop},
				{"class/out", "", sysfs.ErrEscapesRoot},
				{"class/out/passwd", "", sysfs.ErrEscapesRoot},
				{"class/abs", "", sysfs.ErrEscapesRoot},
				{"class/dangling", "", sysfs.ErrDanglingLink},
				{"class/nothing", "", fs.ErrNotExist},
				{"devices/pci0000:44/0000:44:00.0/vendor/x", "", nil},
			} {
				got, err := r.Resolve(tc.name)
				if tc.want == "" {
					require.Error(t, err, tc.name)
					if tc.err != nil {
						assert.ErrorIs(t, err, tc.err, tc.name)
					}
					assert.Contains(t, err.Error(), tc.name)
					continue
				}
				require.NoError(t, err, tc.name)
				assert.Equal(t, tc.want, got, tc.name)
			}
		})
	}
}

func TestReaderReadFile(t *testing.T) {
	t.Parallel()
	for kind, fsys := range roots(t, tree()) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := sysread.New(fsys)
			s, err := r.ReadString("bus/pci/devices/0000:44:00.0/vendor")
			require.NoError(t, err)
			assert.Equal(t, "0x1d0f", s)
			b, err := r.ReadFile("bus/pci/devices/0000:44:00.0/core_count")
			require.NoError(t, err)
			assert.Equal(t, "8", string(b), "no newline added or lost")

			_, err = r.ReadFile("big")
			assert.ErrorIs(t, err, sysfs.ErrTooLarge)
			b, err = r.ReadFile("exact")
			require.NoError(t, err)
			assert.Len(t, b, sysfs.MaxFileSize)

			_, err = r.ReadFile("class/out")
			assert.ErrorIs(t, err, sysfs.ErrEscapesRoot, "an escaping link is never followed")

			_, err = r.ReadFile("devices/system/node")
			assert.Error(t, err)

			ok, err := r.Exists("class/nothing")
			assert.NoError(t, err)
			assert.False(t, ok)
			_, err = r.Exists("class/dangling")
			assert.ErrorIs(t, err, sysfs.ErrDanglingLink)

			target, err := r.ReadLink("class/chain/a")
			require.NoError(t, err)
			assert.Equal(t, "b", target)
		})
	}
}

func TestWriteOnlyFile(t *testing.T) {
	t.Parallel()
	// As root, a 0200 file on disk stays readable, so only the in-memory
	// tree can show a write-only sysfs attribute's EACCES here.
	m, err := sysfs.NewMemFS(tree())
	require.NoError(t, err)
	_, err = sysread.New(m).ReadFile("devices/pci0000:44/0000:44:00.0/remove")
	assert.ErrorIs(t, err, fs.ErrPermission)
	assert.Contains(t, err.Error(), "devices/pci0000:44/0000:44:00.0/remove")
}

func TestMemFSConformance(t *testing.T) {
	t.Parallel()
	m, err := sysfs.NewMemFS([]sysfs.Entry{
		{Path: "a/b/c", Kind: sysfs.KindFile, Data: []byte("x\n")},
		{Path: "a/d", Kind: sysfs.KindDir},
		{Path: "a/e", Kind: sysfs.KindFile, Data: []byte("")},
		{Path: "l", Kind: sysfs.KindLink, Target: "a/b"},
	})
	require.NoError(t, err)
	require.NoError(t, fstest.TestFS(m, "a/b/c", "a/d", "a/e", "l"))
}

func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	es := tree()
	capture := filepath.Join(dir, "c.sysfs")
	var buf bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&buf, nil, es))
	require.NoError(t, os.WriteFile(capture, buf.Bytes(), 0o644))
	unpack(t, filepath.Join(dir, "sys"), es)
	for _, p := range []string{capture, filepath.Join(dir, "sys")} {
		r, err := sysfs.Open(p)
		require.NoError(t, err)
		s, err := sysread.New(r).ReadString("class/chain/a/vendor")
		require.NoError(t, err)
		assert.Equal(t, "0x1d0f", s)
		assert.NoError(t, r.Close())
	}
	_, err := sysfs.Open(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad"), []byte("garbage\n"), 0o644))
	_, err = sysfs.Open(filepath.Join(dir, "bad"))
	assert.ErrorContains(t, err, "want header")
}

func TestReaderCachesMetadata(t *testing.T) {
	t.Parallel()
	m, err := sysfs.NewMemFS(tree())
	require.NoError(t, err)
	c := testfixture.NewCountFS(m)
	r := sysread.New(c)
	for range 3 {
		_, err := r.ReadString("class/chain/a/vendor")
		require.NoError(t, err)
	}
	calls := c.Calls()
	for k, n := range calls {
		if strings.HasPrefix(k, "open ") {
			assert.Equal(t, 3, n, k) // contents are never cached
			continue
		}
		assert.Equal(t, 1, n, "%s asked %d times", k, n)
	}
	assert.NotZero(t, calls["readlink class/chain/a"])
}

func equalEntries(a, b []sysfs.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Path != b[i].Path || a[i].Kind != b[i].Kind || !bytes.Equal(a[i].Data, b[i].Data) || a[i].Target != b[i].Target || a[i].Mode != b[i].Mode {
			return false
		}
	}
	return true
}
