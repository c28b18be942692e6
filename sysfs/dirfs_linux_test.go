package sysfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// prompt returns f's error, or fails the test when f is still blocked after
// 10 s (a named pipe opened for reading without O_NONBLOCK waits for a
// writer for ever). release, when set, unblocks such a reader afterwards.
func prompt(t *testing.T, what string, release func(), f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		if release != nil {
			release()
		}
		t.Fatalf("%s: still blocked after 10 s", what)
		return nil
	}
}

// releaseFIFO opens the named pipe p for writing and closes it, which ends
// the wait of a reader blocked in open.
func releaseFIFO(p string) func() {
	return func() {
		if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
}

// special is a named pipe, a socket and, as root, a character device
// (the numbers of /dev/null) in dir, by name.
func special(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	out["fifo"] = fifo
	sock := filepath.Join(dir, "sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: sock}))
	unix.Close(fd) // the socket file stays
	out["sock"] = sock
	dev := filepath.Join(dir, "dev")
	switch err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); {
	case err == nil:
		out["dev"] = dev
	case errors.Is(err, unix.EPERM):
		t.Log("not allowed to make a device node here: that case is left out")
	default:
		require.NoError(t, err)
	}
	return out
}

// TestNotRegularInDirRoot puts a named pipe, a socket and a device where
// sysfs has attribute files, in both kinds of directory root: each is
// refused at once with ErrNotRegular naming the path, whether opened
// directly, through the Reader, or through a link; described, it is what
// it is; its directory still lists.
func TestNotRegularInDirRoot(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sys")
	attrs := filepath.Join(dir, "devices", "x")
	require.NoError(t, os.MkdirAll(attrs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(attrs, "vendor"), []byte("0x1d0f\n"), 0o444))
	specials := special(t, attrs)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "class"), 0o755))
	for name := range specials {
		require.NoError(t, os.Symlink("../devices/x/"+name, filepath.Join(dir, "class", name)))
	}
	d, err := sysfs.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	o, err := sysfs.OpenDirFallback(dir)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })

	for kind, root := range map[string]*sysfs.Root{"openat2": d, "os.Root": o} {
		for name, p := range specials {
			var release func()
			if name == "fifo" {
				release = releaseFIFO(p)
			}
			attr := "devices/x/" + name
			t.Run(kind+"/"+name, func(t *testing.T) {
				err := prompt(t, "open "+attr, release, func() error {
					f, err := root.Open(attr)
					if err == nil {
						f.Close()
					}
					return err
				})
				assert.ErrorIs(t, err, sysfs.ErrNotRegular)
				assert.ErrorContains(t, err, attr)

				r := sysread.New(root)
				for _, via := range []string{attr, "class/" + name} {
					err := prompt(t, "read "+via, release, func() error {
						_, err := r.ReadFile(via)
						return err
					})
					assert.ErrorIs(t, err, sysfs.ErrNotRegular, via)
					assert.ErrorContains(t, err, via)
				}

				fi, err := root.Lstat(attr)
				require.NoError(t, err)
				assert.False(t, fi.Mode().IsRegular() || fi.IsDir(), "%s is %v", attr, fi.Mode())
			})
		}
		ents, err := sysread.New(root).ReadDir("devices/x")
		require.NoError(t, err, kind)
		assert.Len(t, ents, len(specials)+1, kind)
		s, err := sysread.New(root).ReadString("devices/x/vendor")
		require.NoError(t, err, kind)
		assert.Equal(t, "0x1d0f", s, kind)
	}
}

// TestNotRegularCapture gives Open, as a capture path, a named pipe, a
// socket and a device: each is refused at once with ErrNotRegular naming
// the path.
func TestNotRegularCapture(t *testing.T) {
	t.Parallel()
	for name, p := range special(t, t.TempDir()) {
		var release func()
		if name == "fifo" {
			release = releaseFIFO(p)
		}
		err := prompt(t, "open "+p, release, func() error {
			r, err := sysfs.Open(p)
			if err == nil {
				r.Close()
			}
			return err
		})
		assert.ErrorIs(t, err, sysfs.ErrNotRegular, name)
		assert.ErrorContains(t, err, p, name)
	}
}

// TestLinkInPathConfined puts a link in the middle of a path, to a
// directory outside the root, in both kinds of directory root: every
// question through it is refused, Lstat and ReadLink included, which
// fstatat and readlinkat relative to the root would have answered from
// outside.
func TestLinkInPathConfined(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	out := filepath.Join(top, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(out, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(out, "secret"), []byte("no"), 0o644))
	require.NoError(t, os.Symlink("secret", filepath.Join(out, "link")))
	dir := filepath.Join(top, "sys")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "class"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "devices", "sub"), 0o755))
	require.NoError(t, os.Symlink("secret", filepath.Join(dir, "devices", "link")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(dir, "class", "out")))
	require.NoError(t, os.Symlink("../devices", filepath.Join(dir, "class", "in")))

	d, err := sysfs.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	o, err := sysfs.OpenDirFallback(dir)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	for kind, root := range map[string]*sysfs.Root{"openat2": d, "os.Root": o} {
		t.Run(kind, func(t *testing.T) {
			refused := func(what string, err error) {
				t.Helper()
				if assert.Error(t, err, "%s answered from outside the root", what) {
					assert.ErrorContains(t, err, "class/out/", what)
				}
			}
			fi, err := root.Lstat("class/out/secret")
			refused("lstat", err)
			if err == nil {
				t.Logf("lstat gave %s, %d bytes", fi.Name(), fi.Size())
			}
			_, err = root.Lstat("class/out/link")
			refused("lstat of a link", err)
			target, err := root.ReadLink("class/out/link")
			refused("readlink", err)
			if err == nil {
				t.Logf("readlink gave %q", target)
			}
			_, err = fs.Stat(root, "class/out/secret")
			refused("stat", err)
			_, err = root.Open("class/out/secret")
			refused("open", err)
			_, err = fs.ReadDir(root, "class/out/sub")
			refused("readdir", err)

			// The same entries inside the root answer.
			_, err = root.Lstat("devices/link")
			assert.NoError(t, err)
			target, err = root.ReadLink("devices/link")
			assert.NoError(t, err)
			assert.Equal(t, "secret", target)
		})
	}
	// openat2 refuses a link anywhere in the path, one that stays inside
	// too, as it does for every open: the Reader resolves links itself.
	openat2 := sysfs.AskDirFS(d, nil)
	if !openat2 {
		t.Log("OpenDir fell back to os.Root (openat2 is missing): inside links are followed")
	}
	for _, q := range []func() error{
		func() error { _, err := d.Lstat("class/in/link"); return err },
		func() error { _, err := d.ReadLink("class/in/link"); return err },
		func() error { _, err := fs.Stat(d, "class/in/sub"); return err },
	} {
		if err := q(); openat2 && assert.Error(t, err) {
			assert.ErrorContains(t, err, "class/in/")
		}
	}
	// The Reader, on either root, resolves the inside link and refuses
	// the outside one.
	for kind, root := range map[string]*sysfs.Root{"openat2": d, "os.Root": o} {
		r := sysread.New(root)
		target, err := r.ReadLink("class/in/link")
		require.NoError(t, err, kind)
		assert.Equal(t, "secret", target, kind)
		_, err = r.ReadLink("class/out/link")
		assert.ErrorIs(t, err, sysfs.ErrEscapesRoot, kind)
	}
}
