package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new")
	p := filepath.Join(dir, "f.json")
	require.NoError(t, atomicfile.Write(p, []byte("one"), atomicfile.Options{Perm: 0o600, DirPerm: 0o700}))
	require.NoError(t, atomicfile.Write(p, []byte("two"), atomicfile.Options{Perm: 0o600}))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	// A failed check keeps the old content and leaves no temporary file.
	bad := errors.New("bad")
	err = atomicfile.Write(p, []byte("three"), atomicfile.Options{Check: func(tmp string) error {
		b, _ := os.ReadFile(tmp)
		assert.Equal(t, "three", string(b), "the check sees the whole new content")
		return bad
	}})
	assert.ErrorIs(t, err, bad)
	b, _ = os.ReadFile(p)
	assert.Equal(t, "two", string(b))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left behind")
}
