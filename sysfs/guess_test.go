package sysfs_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
)

// TestReaderOpensWithoutResolving: where the root refuses links on the
// way, the Reader opens a file where it expects it and resolves step by
// step only when that fails; the answers, and the errors, are those of
// resolving first, on every kind of root.
func TestReaderOpensWithoutResolving(t *testing.T) {
	t.Parallel()
	f := func(p, d string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(d)} }
	l := func(p, t string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: t} }
	es := []sysfs.Entry{
		f("devices/pci0/a/uevent", "A"),
		f("devices/pci0/a/sub/x", "X"),
		l("devices/pci0/b", "a"),
		l("devices/pci0/a/mid", "sub"),
		f("devices/pci0/big", strings.Repeat("y", 5000)),
		l("bus/pci/devices/a", "../../../devices/pci0/a"),
		l("bus/pci/devices/gone", "../../../devices/pci0/nothing"),
		l("bus/pci/devices/out", "../../../../secret"),
		l("bus/pci/devices/via", "../../../devices/pci0/b"),
	}
	for kind, fsys := range roots(t, es) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := sysread.New(fsys)
			ents, err := r.ReadDirLinks("bus/pci/devices")
			require.NoError(t, err)
			require.Len(t, ents, 4)

			// Through a link whose target is known: the right file.
			s, err := r.ReadString("bus/pci/devices/a/uevent")
			require.NoError(t, err)
			assert.Equal(t, "A", s)
			p, err := r.Resolve("bus/pci/devices/a")
			require.NoError(t, err)
			assert.Equal(t, "devices/pci0/a", p)
			// Through a link to a link, and a link mid-path in the
			// part not yet resolved: resolved step by step.
			s, err = r.ReadString("bus/pci/devices/via/mid/x")
			require.NoError(t, err)
			assert.Equal(t, "X", s)
			s, err = r.ReadString("devices/pci0/b/sub/x")
			require.NoError(t, err)
			assert.Equal(t, "X", s)
			// A dangling link is damage, not absence; a link leaving
			// the root is named.
			_, err = r.ReadString("bus/pci/devices/gone/uevent")
			assert.ErrorIs(t, err, sysfs.ErrDanglingLink)
			_, err = r.ReadDir("bus/pci/devices/gone")
			assert.ErrorIs(t, err, sysfs.ErrDanglingLink)
			_, err = r.ReadString("bus/pci/devices/out/uevent")
			assert.ErrorIs(t, err, sysfs.ErrEscapesRoot)
			// Absent is absent, and not a dangling link.
			_, err = r.ReadString("devices/pci0/a/missing")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			assert.NotErrorIs(t, err, sysfs.ErrDanglingLink)
			_, err = r.ReadDir("devices/pci0/nothing")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			// Longer than the first page: read whole.
			s, err = r.ReadString("devices/pci0/big")
			require.NoError(t, err)
			assert.Len(t, s, 5000)
		})
	}
}

// TestReaderRemembersMisses: a file or directory found missing is looked
// for once, however often it is asked for.
func TestReaderRemembersMisses(t *testing.T) {
	t.Parallel()
	m, err := sysfs.NewMemFS(tree())
	require.NoError(t, err)
	c := testfixture.NewCountFS(m)
	r := sysread.New(c)
	for range 3 {
		_, err := r.ReadString("devices/none/vendor")
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = r.ReadDir("devices/none")
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = r.Resolve("devices/none/x")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	}
	for k, n := range c.Calls() {
		assert.Equal(t, 1, n, "%s asked %d times", k, n)
	}
}

// TestMemFSNoFollowStopsAtLink: like openat2 with RESOLVE_NO_SYMLINKS, a
// link on the way is refused whatever lies beyond it, even nothing.
func TestMemFSNoFollowStopsAtLink(t *testing.T) {
	t.Parallel()
	m, err := sysfs.NewMemFS([]sysfs.Entry{
		{Path: "d/f", Kind: sysfs.KindFile},
		{Path: "d/l", Kind: sysfs.KindLink, Target: "nowhere"},
		{Path: "d/m", Kind: sysfs.KindLink, Target: "."},
	})
	require.NoError(t, err)
	for _, name := range []string{"d/l/x", "d/m/f", "d/m/none", "d/l"} {
		_, err := m.OpenNoFollow(name)
		assert.ErrorContains(t, err, "symbolic link", name)
		assert.NotErrorIs(t, err, fs.ErrNotExist, name)
	}
	_, err = m.OpenNoFollow("d/none/x")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.ReadDirNoFollow("d/m")
	assert.ErrorContains(t, err, "symbolic link")
	_, err = m.OpenNoFollow("d/f/x")
	assert.ErrorContains(t, err, "not a directory")
}
