package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestDurability counts the fsyncs of each durability: the file (before
// the rename) and the directory, the file alone, none.
func TestDurability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d     atomicfile.Durability
		syncs []string
	}{
		{atomicfile.SyncAll, []string{"f.json.tmp", "dir"}},
		{atomicfile.SyncFile, []string{"f.json.tmp"}},
		{atomicfile.SyncNone, nil},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "f.json")
		var synced []string
		o := atomicfile.Options{Durability: tc.d, Sync: func(f *os.File) error {
			fi, err := f.Stat()
			require.NoError(t, err)
			if fi.IsDir() {
				synced = append(synced, "dir")
			} else {
				synced = append(synced, "f.json.tmp")
				assert.True(t, strings.HasPrefix(filepath.Base(f.Name()), ".f.json."), "the temporary file, before the rename")
			}
			return nil
		}}
		require.NoError(t, atomicfile.Write(p, []byte("one"), o))
		assert.Equal(t, tc.syncs, synced, "durability %d", tc.d)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "one", string(b))

		// A failed fsync keeps the old content and leaves no temporary
		// file; where there is none, nothing can fail.
		bad := errors.New("input/output error")
		o.Sync = func(*os.File) error { return bad }
		err = atomicfile.Write(p, []byte("two"), o)
		want := "one"
		if tc.syncs == nil {
			want = "two"
			assert.NoError(t, err)
		} else {
			assert.ErrorIs(t, err, bad)
		}
		b, err = os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, want, string(b), "durability %d", tc.d)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, ents, 1, "no temporary file left behind")
	}
}

// TestWriteOpen: the file returned is the one at the path until another
// write replaces it.
func TestWriteOpen(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "f.json")
	f, err := atomicfile.WriteOpen(p, []byte("one"), atomicfile.Options{Durability: atomicfile.SyncNone})
	require.NoError(t, err)
	defer f.Close()
	held, err := f.Stat()
	require.NoError(t, err)
	cur, err := os.Stat(p)
	require.NoError(t, err)
	assert.True(t, os.SameFile(held, cur))
	require.NoError(t, atomicfile.Write(p, []byte("two"), atomicfile.Options{Durability: atomicfile.SyncNone}))
	cur, err = os.Stat(p)
	require.NoError(t, err)
	assert.False(t, os.SameFile(held, cur))
}
