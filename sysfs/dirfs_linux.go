package sysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dirFS reads a directory tree with openat2(2): every open is confined to
// the root (RESOLVE_BENEATH) and refuses any symbolic link on the way
// (RESOLVE_NO_SYMLINKS), so the kernel itself guarantees what the Reader
// does by resolving links first. One system call an open, where os.Root
// walks the path one component at a time.
//
// Lstat and ReadLink use fstatat and readlinkat relative to the root: they
// expect a parent path without links, which the Reader guarantees.
type dirFS struct {
	root *os.File
	dir  string
}

var errNoOpenat2 = errors.New("openat2 not available")

func openDirFS(dir string) (*dirFS, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	d := &dirFS{root: os.NewFile(uintptr(fd), dir), dir: dir}
	// Probe: kernels before 5.6, and some seccomp profiles, lack openat2.
	probe, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_DIRECTORY, Resolve: resolveFlags})
	if err != nil {
		d.root.Close()
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
			return nil, errNoOpenat2
		}
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	unix.Close(probe)
	return d, nil
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

func (d *dirFS) Close() error { return d.root.Close() }

func (d *dirFS) fd() int { return int(d.root.Fd()) }

func (d *dirFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	var fd int
	var err error
	for {
		fd, err = unix.Openat2(d.fd(), name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: resolveFlags})
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	if err != nil {
		if err == unix.ELOOP {
			return nil, &fs.PathError{Op: "open", Path: name, Err: errLinkInPath}
		}
		if err == unix.EXDEV {
			return nil, &fs.PathError{Op: "open", Path: name, Err: ErrEscapesRoot}
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	// A bare descriptor, not an *os.File: os.NewFile costs an fcntl(2) to
	// probe for non-blocking mode, a fifth of a small file's system calls.
	return &fdFile{fd: fd, name: name}, nil
}

// fdFile is an open regular file read with plain read(2).
type fdFile struct {
	fd   int
	name string
}

func (f *fdFile) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f *fdFile) Close() error { return unix.Close(f.fd) }

func (f *fdFile) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: f.name, Err: err}
	}
	return statInfo{name: baseName(f.name), st: st}, nil
}

// ReadDir lets fs.ReadDir and callers that type-assert fs.ReadDirFile list
// a directory opened as a plain descriptor.
func (f *fdFile) ReadDir(n int) ([]fs.DirEntry, error) {
	fd, err := unix.Dup(f.fd)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: err}
	}
	d := os.NewFile(uintptr(fd), f.name)
	defer d.Close()
	return d.ReadDir(n)
}

// OpenNoFollow is Open: openat2 refuses links in every open.
func (d *dirFS) OpenNoFollow(name string) (fs.File, error) { return d.Open(name) }

func (d *dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.(*fdFile).ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: stripPathError(err)}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

func (d *dirFS) ReadLink(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.fd(), name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("link target longer than %d bytes", len(buf))}
		}
		buf = make([]byte, 2*len(buf))
	}
}

func (d *dirFS) Lstat(name string) (fs.FileInfo, error) {
	return d.stat("lstat", name, unix.AT_SYMLINK_NOFOLLOW)
}

func (d *dirFS) Stat(name string) (fs.FileInfo, error) {
	f, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

func (d *dirFS) stat(op, name string, flags int) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd(), name, &st, flags); err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return statInfo{name: baseName(name), st: st}, nil
}

func baseName(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s statInfo) Name() string { return s.name }
func (s statInfo) Size() int64  { return s.st.Size }
func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	return m
}
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (s statInfo) Sys() any           { return &s.st }
