package sysfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// TestReaderClimbsAfterLink: a link target with ".." after a name that is
// itself a link ("m/../x") climbs from where m leads, as the kernel does,
// not from m's directory; one that climbs out that way leaves the root.
func TestReaderClimbsAfterLink(t *testing.T) {
	t.Parallel()
	f := func(p, d string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(d)} }
	l := func(p, t string) sysfs.Entry { return sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: t} }
	es := []sysfs.Entry{
		f("d/x", "lexical"),
		f("e/x", "kernel"),
		f("e/f/y", ""),
		l("d/m", ".."),
		l("d/m2", "../e/f"),
		l("d/up", "m/../../etc"),
		l("d/in", "m2/../x"),
		l("d/file", "x/../x"),
	}
	for kind, fsys := range roots(t, es) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := sysread.New(fsys)
			s, err := r.ReadString("d/in")
			require.NoError(t, err)
			assert.Equal(t, "kernel", s)
			_, err = r.Resolve("d/up")
			assert.ErrorIs(t, err, sysfs.ErrEscapesRoot)
			_, err = r.Resolve("d/file")
			assert.ErrorContains(t, err, "d/x is not a directory")
		})
	}
	// What the kernel says on disk.
	dir := filepath.Join(t.TempDir(), "sys")
	unpack(t, dir, es)
	b, err := os.ReadFile(filepath.Join(dir, "d", "in"))
	require.NoError(t, err)
	assert.Equal(t, "kernel", string(b))
}
