package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/sysfs"
)

const g5Capture = "../../../testdata/sysfs/g5.8xlarge.sysfs"

// TestSnapshotOutputRefused: -o names something that is not a regular
// file, or a file in a directory that does not exist. Each is refused
// with exit 1 and left as it was; nothing is created.
func TestSnapshotOutputRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	regular := filepath.Join(dir, "regular")
	require.NoError(t, os.WriteFile(regular, []byte("kept"), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink("regular", link))
	cases := map[string]string{
		fifo: "named pipe",
		sub:  "directory",
		link: "symbolic link",
		filepath.Join(dir, "missing", "out.sysfs"): "no such file or directory",
	}
	// As root, /dev/null's own numbers, where a test may make them.
	null := filepath.Join(dir, "null")
	switch err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); {
	case err == nil:
		cases[null] = "character device"
	case errors.Is(err, unix.EPERM):
		t.Log("not allowed to make a device node here: that case is left out")
	default:
		require.NoError(t, err)
	}
	before := map[string]fs.FileMode{}
	for p := range cases {
		if fi, err := os.Lstat(p); err == nil {
			before[p] = fi.Mode()
		}
	}
	for p, why := range cases {
		code, _, errOut := runCLI("snapshot", "--sysfs", g5Capture, "-o", p)
		assert.Equal(t, 1, code, p)
		assert.Contains(t, errOut, p)
		assert.Contains(t, errOut, why, p)
	}
	for p := range cases {
		fi, err := os.Lstat(p)
		if mode, ok := before[p]; ok {
			require.NoError(t, err, p)
			assert.Equal(t, mode, fi.Mode(), "%s changed", p)
		} else {
			assert.ErrorIs(t, err, fs.ErrNotExist, "%s made", p)
		}
	}
	_, err := os.Stat(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "no directory made for -o")
	b, err := os.ReadFile(regular)
	require.NoError(t, err)
	assert.Equal(t, "kept", string(b), "not written through the link")

	// A regular file is replaced, and no temporary file stays.
	code, _, errOut := runCLI("snapshot", "--sysfs", g5Capture, "-o", regular)
	require.Equal(t, 0, code, errOut)
	b, err = os.ReadFile(regular)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "efakit-sysfs-capture v2\n"))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotContains(t, e.Name(), ".tmp")
	}
}

// TestSnapshotUnpack: --unpack refuses a directory that exists, or a link
// to one, and writes nothing into it; from a capture whose class directory
// is a link, a class link whose target leads out of the unpacked tree is
// left out with an error, and every link unpacked resolves inside.
func TestSnapshotUnpack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	require.NoError(t, os.Mkdir(existing, 0o755))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink("existing", link))
	for _, p := range []string{existing, link} {
		code, _, errOut := runCLI("snapshot", "--sysfs", g5Capture, "--unpack", p)
		assert.Equal(t, 1, code, p)
		assert.Contains(t, errOut, p+" exists")
	}
	ents, err := os.ReadDir(existing)
	require.NoError(t, err)
	assert.Empty(t, ents)

	g5, err := sysfs.OpenCapture(g5Capture)
	require.NoError(t, err)
	var es []sysfs.Entry
	for _, e := range g5.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if e.Path != "class/infiniband" && !strings.HasPrefix(e.Path, "class/infiniband/") {
			es = append(es, e)
		}
	}
	es = append(es,
		sysfs.Entry{Path: "class/infiniband", Kind: sysfs.KindLink, Target: "../devices/virtual/a/b/ib"},
		sysfs.Entry{Path: "devices/virtual/a/b/ib/efa_0", Kind: sysfs.KindLink, Target: "../../../../../devices/pci0000:00/0000:00:06.0/infiniband/efa_0"},
	)
	crafted := filepath.Join(dir, "crafted.sysfs")
	f, err := os.Create(crafted)
	require.NoError(t, err)
	require.NoError(t, sysfs.WriteCapture(f, nil, es))
	require.NoError(t, f.Close())
	out := filepath.Join(dir, "sys")
	code, _, errOut := runCLI("snapshot", "--sysfs", crafted, "--unpack", out)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "class/infiniband/efa_0")
	top, err := filepath.EvalSymlinks(out)
	require.NoError(t, err)
	links := 0
	require.NoError(t, filepath.WalkDir(out, func(p string, e fs.DirEntry, err error) error {
		require.NoError(t, err)
		if e.Type()&fs.ModeSymlink != 0 {
			links++
			real, err := filepath.EvalSymlinks(p)
			require.NoError(t, err, p)
			assert.True(t, strings.HasPrefix(real, top+string(filepath.Separator)), "%s resolves to %s", p, real)
		}
		return nil
	}))
	assert.NotZero(t, links)
}
