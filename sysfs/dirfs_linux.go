package sysfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/efakit/efakit/internal/linkpath"
	"golang.org/x/sys/unix"
)

// dirFS reads a directory tree with openat2(2): every open is confined to
// the root (RESOLVE_BENEATH) and refuses any symbolic link on the way
// (RESOLVE_NO_SYMLINKS), so the kernel itself guarantees what the Reader
// does by resolving links first. One system call resolves a whole path,
// where os.Root walks it one component at a time; an fstat(2) after each
// open refuses what is neither a regular file nor a directory.
//
// Lstat and ReadLink refuse a link in the parent path too: they open the
// entry itself with O_PATH|O_NOFOLLOW under the same rules, then ask about
// that descriptor. Only a name at the top of the root, which has no parent
// to hold a link, is asked about directly.
type dirFS struct {
	root *os.File
	dir  string
	// ask, when set (by tests), sees every question that reaches the
	// file system: the operation and the path.
	ask func(op, name string)
	// calls, when set (by tests), counts the system calls made, by name.
	calls *syscalls
}

// syscalls counts system calls by name.
type syscalls struct {
	mu sync.Mutex
	n  map[string]int
}

// made counts one system call; a no-op unless a test asked for counts.
func (d *dirFS) made(name string) {
	if c := d.calls; c != nil {
		c.mu.Lock()
		c.n[name]++
		c.mu.Unlock()
	}
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

// openFlags never block: a named pipe opened for reading waits for a
// writer without O_NONBLOCK, and a terminal must not become ours.
const openFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

func (d *dirFS) Close() error { return d.root.Close() }

func (d *dirFS) fd() int { return int(d.root.Fd()) }

func (d *dirFS) asked(op, name string) {
	if d.ask != nil {
		d.ask(op, name)
	}
}

// openat2 opens name beneath the root without following any link.
func (d *dirFS) openat2(op, name string, flags uint64) (int, error) {
	if !fs.ValidPath(name) {
		return -1, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	var fd int
	var err error
	// EAGAIN: the kernel saw a rename race under RESOLVE_BENEATH and asks
	// for a retry. Bounded, since O_NONBLOCK also gives EAGAIN for a file
	// under a lease.
	for range 8 {
		fd, err = unix.Openat2(d.fd(), name, &unix.OpenHow{Flags: flags, Resolve: resolveFlags})
		if err != unix.EINTR && err != unix.EAGAIN {
			d.made("openat2") // a retry is the kernel's or a signal's, not the Reader's
			break
		}
	}
	switch {
	case err == nil:
		return fd, nil
	case err == unix.ELOOP:
		return -1, &fs.PathError{Op: op, Path: name, Err: linkpath.ErrLinkInPath}
	case err == unix.EXDEV:
		return -1, &fs.PathError{Op: op, Path: name, Err: ErrEscapesRoot}
	}
	return -1, &fs.PathError{Op: op, Path: name, Err: err}
}

func (d *dirFS) Open(name string) (fs.File, error) {
	d.asked("open", name)
	return d.open("open", name)
}

// open opens a regular file or a directory for reading, refusing every
// other type with ErrNotRegular.
func (d *dirFS) open(op, name string) (*fdFile, error) {
	fd, err := d.openat2(op, name, openFlags)
	if err != nil {
		// A socket cannot be opened at all (ENXIO): say what it is.
		if errors.Is(err, unix.ENXIO) {
			if st, serr := d.lstat(op, name); serr == nil {
				if e := notRegular(statInfo{st: st}.Mode()); e != nil {
					return nil, &fs.PathError{Op: op, Path: name, Err: e}
				}
			}
		}
		return nil, err
	}
	var st unix.Stat_t
	d.made("fstat")
	if err := unix.Fstat(fd, &st); err != nil {
		d.close(fd)
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if e := notRegular(statInfo{st: st}.Mode()); e != nil {
		d.close(fd)
		return nil, &fs.PathError{Op: op, Path: name, Err: e}
	}
	// A bare descriptor, not an *os.File: os.NewFile costs an fcntl(2) to
	// probe for non-blocking mode, a fifth of a small file's system calls.
	return &fdFile{fd: fd, name: name, d: d}, nil
}

func (d *dirFS) close(fd int) error {
	d.made("close")
	return unix.Close(fd)
}

// fdFile is an open regular file or directory read with plain read(2).
type fdFile struct {
	fd   int
	name string
	d    *dirFS
}

func (f *fdFile) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, b)
		if err == unix.EINTR {
			continue
		}
		f.d.made("read")
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f *fdFile) Close() error { return f.d.close(f.fd) }

func (f *fdFile) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	f.d.made("fstat")
	if err := unix.Fstat(f.fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: f.name, Err: err}
	}
	return statInfo{name: baseName(f.name), st: st}, nil
}

// ReadDir lets fs.ReadDir and callers that type-assert fs.ReadDirFile list
// a directory opened as a plain descriptor.
func (f *fdFile) ReadDir(n int) ([]fs.DirEntry, error) {
	f.d.made("dup")
	fd, err := unix.Dup(f.fd)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: err}
	}
	d := os.NewFile(uintptr(fd), f.name)
	defer d.Close()
	return d.ReadDir(n)
}

// OpenNoFollow is Open: openat2 refuses links in every open.
func (d *dirFS) OpenNoFollow(name string) (fs.File, error) {
	d.asked("open", name)
	return d.open("open", name)
}

func (d *dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	d.asked("readdir", name)
	ents, _, err := d.readDir("readdir", name, false)
	return ents, err
}

// ReadDirNoFollow is ReadDir: openat2 refuses links in every open.
func (d *dirFS) ReadDirNoFollow(name string) ([]fs.DirEntry, error) { return d.ReadDir(name) }

// ReadDirLinks lists name and reads the target of every symbolic link in
// it while the directory is open: one readlinkat(2) per link, relative to
// the directory, where ReadLink of each would open the link first.
func (d *dirFS) ReadDirLinks(name string) ([]fs.DirEntry, map[string]string, error) {
	d.asked("readdir", name)
	return d.readDir("readdir", name, true)
}

// direntBufSize holds a few hundred sysfs entries: one getdents64(2)
// lists a PCI function's directory, or bus/pci/devices of a p5.48xlarge.
const direntBufSize = 16 << 10

// readDir lists name with getdents64(2) on the descriptor openat2 gave:
// an open, the reads, a close, and no more (os.File's ReadDir would dup
// the descriptor and probe its flags). The kernel's d_type gives each
// entry's type; where a file system does not fill it, an fstatat(2)
// relative to the directory does.
func (d *dirFS) readDir(op, name string, links bool) ([]fs.DirEntry, map[string]string, error) {
	// O_DIRECTORY: the kernel opens nothing else, so no type check.
	fd, err := d.openat2(op, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	defer d.close(fd)
	var targets map[string]string
	var ents []fs.DirEntry
	buf := make([]byte, direntBufSize)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue // interrupted (a signal: the runtime's preemption under load), not counted
		}
		d.made("getdents64")
		if err != nil {
			return nil, nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) >= direntHeader; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < direntHeader || reclen > len(b) {
				return nil, nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("malformed directory entry")}
			}
			rec := b[:reclen]
			b = b[reclen:]
			nameb := rec[direntHeader:]
			if i := bytes.IndexByte(nameb, 0); i >= 0 {
				nameb = nameb[:i]
			}
			ename := string(nameb)
			if ename == "." || ename == ".." {
				continue
			}
			typ, known := direntType(rec[18])
			if !known {
				var st unix.Stat_t
				d.made("fstatat")
				if err := unix.Fstatat(fd, ename, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if err == unix.ENOENT {
						continue // gone since the listing
					}
					return nil, nil, &fs.PathError{Op: op, Path: name + "/" + ename, Err: err}
				}
				typ = statInfo{st: st}.Mode().Type()
			}
			ents = append(ents, &dirent{dir: d, path: name, name: ename, typ: typ})
			if links && typ == fs.ModeSymlink {
				t, err := d.readlinkat(fd, ename)
				if err != nil {
					return nil, nil, &fs.PathError{Op: "readlink", Path: name + "/" + ename, Err: err}
				}
				if targets == nil {
					targets = map[string]string{}
				}
				targets[ename] = t
			}
		}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, targets, nil
}

// direntHeader is the size of linux_dirent64 before its name: inode (8),
// offset (8), record length (2), type (1).
const direntHeader = 19

func direntType(t byte) (fs.FileMode, bool) {
	switch t {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	return 0, false
}

// dirent is one entry of a listing; Info describes it when asked.
type dirent struct {
	dir  *dirFS
	path string
	name string
	typ  fs.FileMode
}

func (e *dirent) Name() string      { return e.name }
func (e *dirent) IsDir() bool       { return e.typ.IsDir() }
func (e *dirent) Type() fs.FileMode { return e.typ }
func (e *dirent) String() string    { return fs.FormatDirEntry(e) }
func (e *dirent) Info() (fs.FileInfo, error) {
	p := e.name
	if e.path != "." {
		p = e.path + "/" + e.name
	}
	return e.dir.Lstat(p)
}

// readlinkat reads the link name relative to dirfd ("" for the link
// dirfd itself), growing its buffer up to 64 KiB.
func (d *dirFS) readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		d.made("readlinkat")
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", fmt.Errorf("link target longer than %d bytes", len(buf))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// entry opens name itself, a link included, for a question about it; at
// the top of the root no descriptor is needed (-1: ask the root by name).
func (d *dirFS) entry(op, name string) (int, error) {
	if !fs.ValidPath(name) {
		return -1, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if !strings.Contains(name, "/") {
		return -1, nil
	}
	return d.openat2(op, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
}

func (d *dirFS) ReadLink(name string) (string, error) {
	d.asked("readlink", name)
	fd, err := d.entry("readlink", name)
	if err != nil {
		return "", err
	}
	dirfd, rel := d.fd(), name
	if fd >= 0 {
		defer d.close(fd)
		dirfd, rel = fd, "" // the link itself (readlinkat(2), empty path)
	}
	t, err := d.readlinkat(dirfd, rel)
	if err == unix.ENOENT && fd >= 0 {
		err = unix.EINVAL // the entry exists: it is not a link
	}
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

func (d *dirFS) Lstat(name string) (fs.FileInfo, error) {
	d.asked("lstat", name)
	st, err := d.lstat("lstat", name)
	if err != nil {
		return nil, err
	}
	return statInfo{name: baseName(name), st: st}, nil
}

func (d *dirFS) lstat(op, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := d.entry(op, name)
	if err != nil {
		return st, err
	}
	if fd >= 0 {
		d.made("fstat")
		err = unix.Fstat(fd, &st)
		d.close(fd)
	} else {
		d.made("fstatat")
		err = unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return st, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return st, nil
}

// Stat describes name, which holds no link, without opening it: a device
// or a named pipe is described, never opened.
func (d *dirFS) Stat(name string) (fs.FileInfo, error) {
	d.asked("stat", name)
	fd, err := d.openat2("stat", name, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer d.close(fd)
	var st unix.Stat_t
	d.made("fstat")
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
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
