package sysfs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// unpack writes es under dir as WriteDir does, and the links WriteDir
// refuses (those that leave the root) by hand: trees for the Reader to
// refuse.
func unpack(t *testing.T, dir string, es []sysfs.Entry) {
	t.Helper()
	var safe, hostile []sysfs.Entry
	for _, e := range es {
		if e.Kind == sysfs.KindLink && sysfs.CheckLink(e.Path, e.Target) != nil {
			hostile = append(hostile, e)
			continue
		}
		safe = append(safe, e)
	}
	require.NoError(t, sysfs.WriteDir(dir, safe))
	for _, e := range hostile {
		require.NoError(t, os.Symlink(e.Target, filepath.Join(dir, filepath.FromSlash(e.Path))))
	}
}

func TestCheckLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, target string
		ok           bool
	}{
		{"bus/pci/devices/0000:44:00.0", "../../../devices/pci0000:44/0000:44:00.0", true},
		{"class/chain/a", "b", true},
		{"a/l", "..", true},
		{"a/l", "./.././x", true},
		{"a/l", "x//y/", true},
		{"bus/pci/devices/0000:44:00.0", "../../../../devices", false},
		{"l", "..", false},
		{"class/abs", "/etc/passwd", false},
		{"a/b/l", "m/../../x", false}, // m may be a link: the kernel follows it first
		{"a/b/l", "../m/..", false},
		{"a/l", "", false},
		{"../l", "x", false},
	} {
		err := sysfs.CheckLink(tc.path, tc.target)
		if tc.ok {
			assert.NoError(t, err, "%s -> %s", tc.path, tc.target)
			continue
		}
		if assert.Error(t, err, "%s -> %s", tc.path, tc.target) {
			assert.ErrorContains(t, err, tc.path)
		}
	}
	assert.ErrorIs(t, sysfs.CheckLink("l", "../x"), sysfs.ErrEscapesRoot)
}

// TestWriteDirLinksStayInside unpacks a tree whose links try every way out
// of it: none is written, each is named in the error, what is safe is
// written, and every link on disk resolves inside the output.
func TestWriteDirLinksStayInside(t *testing.T) {
	t.Parallel()
	f := func(p, d string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(d)} }
	l := func(p, t string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: t} }
	es := []sysfs.Entry{
		f("devices/x/vendor", "0x1d0f\n"),
		l("bus/pci/devices/x", "../../../devices/x"),
		l("class/abs", "/etc"),
		l("class/up", "../../outside"),
		l("d/m", ".."),          // the root itself: allowed
		l("d/l", "m/../../etc"), // lexically "etc"; on disk through m, above the root
		l("e/l", "../devices"),  // inside...
		f("e/l/planted", "x"),   // ...but nothing is written through a link
		f("e/file", ""),
		f("e/file/under", "x"),  // nor under a file
		l("class/up/x", "../y"), // nor under a link left out
		{Path: "../z", Kind: sysfs.KindFile},
	}
	top := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(top, "outside"), 0o755))
	dir := filepath.Join(top, "sys")
	err := sysfs.WriteDir(dir, es)
	require.Error(t, err)
	for _, p := range []string{"class/abs", "class/up", "d/l", "e/l/planted", "e/file/under", "class/up/x", "../z"} {
		assert.ErrorContains(t, err, `"`+p+`"`)
	}
	assert.ErrorIs(t, err, sysfs.ErrEscapesRoot)
	for _, p := range []string{"class/abs", "class/up", "d/l", "e/l/planted", "devices/planted", "e/file/under"} {
		_, lerr := os.Lstat(filepath.Join(dir, p))
		assert.Error(t, lerr, "%s written", p)
	}
	_, err = os.Lstat(filepath.Join(top, "z"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	entries, err := os.ReadDir(filepath.Join(top, "outside"))
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written outside")

	// Every link on disk resolves inside the output.
	abs, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	links := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		require.NoError(t, err)
		if e.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		links++
		real, err := filepath.EvalSymlinks(p)
		require.NoError(t, err, p)
		assert.True(t, real == abs || strings.HasPrefix(real, abs+string(filepath.Separator)), "%s resolves to %s", p, real)
		return nil
	}))
	assert.Equal(t, 3, links, "bus/pci/devices/x, d/m, e/l")
	r, err := sysfs.OpenDir(dir)
	require.NoError(t, err)
	defer r.Close()
	s, err := sysread.New(r).ReadString("bus/pci/devices/x/vendor")
	require.NoError(t, err)
	assert.Equal(t, "0x1d0f", s)
}

// TestWriteDirMakesItsDirectory: WriteDir writes only into a directory it
// makes itself; an existing directory, or a link to one, is refused and
// left as it was.
func TestWriteDirMakesItsDirectory(t *testing.T) {
	t.Parallel()
	es := []sysfs.Entry{{Path: "a/b", Kind: sysfs.KindFile, Data: []byte("x")}}
	top := t.TempDir()
	existing := filepath.Join(top, "existing")
	require.NoError(t, os.Mkdir(existing, 0o755))
	link := filepath.Join(top, "link")
	require.NoError(t, os.Symlink("existing", link))
	for _, dir := range []string{existing, link} {
		err := sysfs.WriteDir(dir, es)
		assert.ErrorIs(t, err, fs.ErrExist, dir)
		assert.ErrorContains(t, err, dir)
	}
	entries, err := os.ReadDir(existing)
	require.NoError(t, err)
	assert.Empty(t, entries)

	// Parents are made; modes are applied last, deepest first.
	dir := filepath.Join(top, "new", "sys")
	// A user other than root cannot remove files from the read-only
	// directory: t.TempDir's removal needs it writable again.
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	require.NoError(t, sysfs.WriteDir(dir, []sysfs.Entry{
		{Path: "ro", Kind: sysfs.KindDir, Mode: 0o555},
		{Path: "ro/remove", Kind: sysfs.KindFile, Mode: 0o200},
		{Path: "ro/vendor", Kind: sysfs.KindFile, Data: []byte("0x1d0f\n")},
	}))
	for p, want := range map[string]fs.FileMode{"ro": fs.ModeDir | 0o555, "ro/remove": 0o200, "ro/vendor": 0o444} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode(), p)
	}
}
