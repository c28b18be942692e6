package sysfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// fuzzTree is the tree that fuzzed links are added to: directories to
// climb out of and files to find.
var fuzzTree = []sysfs.Entry{
	{Path: "a/b/c", Kind: sysfs.KindDir},
	{Path: "a/f", Kind: sysfs.KindFile, Data: []byte("a/f")},
	{Path: "d/f", Kind: sysfs.KindFile, Data: []byte("d/f")},
}

// fuzzLinks returns the two fuzzed links, or false when they cannot be
// links of the tree at all.
func fuzzLinks(p1, t1, p2, t2 string) ([]sysfs.Entry, bool) {
	if p1 == p2 {
		return nil, false
	}
	var out []sysfs.Entry
	for _, l := range [][2]string{{p1, t1}, {p2, t2}} {
		p, target := l[0], l[1]
		// A target that is not UTF-8 cannot name an fs.FS path: the
		// Reader refuses what the kernel may follow.
		if !validLinkPath(p) || target == "" || len(target) > 200 || strings.ContainsRune(target, 0) || !utf8.ValidString(target) {
			return nil, false
		}
		for _, e := range fuzzTree {
			if e.Path == p || strings.HasPrefix(e.Path, p+"/") || strings.HasPrefix(p, e.Path+"/") {
				return nil, false
			}
		}
		out = append(out, sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: target})
	}
	if strings.HasPrefix(p2, p1+"/") || strings.HasPrefix(p1, p2+"/") {
		return nil, false
	}
	return out, true
}

// validLinkPath: paths of an fs.FS (valid UTF-8, no "." or ".."), short.
func validLinkPath(p string) bool {
	return fs.ValidPath(p) && p != "." && len(p) < 100 && !strings.ContainsRune(p, 0)
}

var linkSeeds = [][4]string{
	{"a/b/l", "../../d", "x", "a/b/l/f"},
	{"d/m", "..", "d/l", "m/../../etc"},
	{"d/m2", "../a/b/c", "d/in", "m2/../../f"},
	{"a/up", "../..", "a/abs", "/etc"},
	{"x", "y", "y", "x"},
	{"a/b/c/l", "../../../a/f", "d/l", "../a/b/c/l"},
}

// kernelOpen resolves name under dir as the kernel does, confined to dir
// (RESOLVE_BENEATH fails with EXDEV where a path would leave it).
func kernelOpen(t *testing.T, dir, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	return st, unix.Fstat(fd, &st)
}

// FuzzWriteDirLinks: whatever links a capture holds, none that WriteDir
// writes resolves outside its directory, by the kernel's own resolution.
func FuzzWriteDirLinks(f *testing.F) {
	for _, s := range linkSeeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, p1, t1, p2, t2 string) {
		links, ok := fuzzLinks(p1, t1, p2, t2)
		if !ok {
			return
		}
		dir := filepath.Join(t.TempDir(), "sys")
		_ = sysfs.WriteDir(dir, append(append([]sysfs.Entry{}, fuzzTree...), links...))
		for _, l := range links {
			if _, err := os.Lstat(filepath.Join(dir, l.Path)); err != nil {
				continue // left out
			}
			for _, name := range []string{l.Path, l.Path + "/f", l.Path + "/c"} {
				if _, err := kernelOpen(t, dir, name); errors.Is(err, unix.EXDEV) {
					t.Fatalf("%s -> %s written; %s leaves the directory", l.Path, l.Target, name)
				}
			}
		}
	})
}

// FuzzResolveAsKernel: on a tree with any two links, the Reader resolves
// every path to what the kernel opens, and where the kernel's resolution
// leaves the root, the Reader says ErrEscapesRoot.
func FuzzResolveAsKernel(f *testing.F) {
	for _, s := range linkSeeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, p1, t1, p2, t2 string) {
		links, ok := fuzzLinks(p1, t1, p2, t2)
		if !ok {
			return
		}
		dir := filepath.Join(t.TempDir(), "sys")
		if err := sysfs.WriteDir(dir, fuzzTree); err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			p := filepath.Join(dir, filepath.FromSlash(l.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return // under the other link
			}
			if err := os.Symlink(l.Target, p); err != nil {
				return
			}
		}
		root, err := sysfs.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		r := sysread.New(root)
		for _, l := range links {
			for _, name := range []string{l.Path, l.Path + "/f", l.Path + "/c"} {
				got, rerr := r.Resolve(name)
				want, kerr := kernelOpen(t, dir, name)
				switch {
				case kerr == nil && rerr != nil:
					t.Fatalf("%s: the kernel opens it, the Reader says %v", name, rerr)
				case kerr == nil:
					gst, err := kernelOpen(t, dir, got)
					if err != nil || gst.Ino != want.Ino || gst.Dev != want.Dev {
						t.Fatalf("%s: the Reader resolves it to %s, not what the kernel opens", name, got)
					}
				case errors.Is(kerr, unix.EXDEV):
					if !errors.Is(rerr, sysfs.ErrEscapesRoot) {
						t.Fatalf("%s: leaves the root for the kernel, the Reader says %q, %v", name, got, rerr)
					}
				case rerr == nil:
					t.Fatalf("%s: the kernel says %v, the Reader resolves it to %s", name, kerr, got)
				}
			}
		}
	})
}
