package sysfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/efakit/efakit/internal/fserr"
)

// Root is an opened sysfs root: a live tree such as /sys, an unpacked
// capture, or a capture file read into memory.
type Root struct {
	fs.ReadLinkFS
	// Source is the path the root was opened from.
	Source string
	closer io.Closer
}

// Close releases the directory handle of a root opened from a directory.
func (r *Root) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Open opens a sysfs root from a directory or from a capture file, by what
// the path names.
func Open(name string) (*Root, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("open sysfs root: %w", err)
	}
	if fi.IsDir() {
		return openDir(name)
	}
	return OpenCapture(name)
}

// openDir opens the directory dir as a sysfs root. On Linux every open goes
// through openat2(2) confined to dir and refusing symbolic links, so even a
// caller that skips the Reader cannot be led out of the root; where openat2
// is missing, os.Root gives the same guarantee more slowly. Either way a
// named pipe, socket or device is never read: ErrNotRegular.
func openDir(dir string) (*Root, error) {
	if d, err := openDirFS(dir); err == nil {
		return &Root{ReadLinkFS: d, Source: dir, closer: d}, nil
	} else if !errors.Is(err, errNoOpenat2) {
		return nil, fmt.Errorf("open sysfs root: %w", err)
	}
	return openRootFS(dir)
}

// openRootFS opens dir through os.Root, the fallback of openDir.
func openRootFS(dir string) (*Root, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open sysfs root: %w", err)
	}
	return &Root{ReadLinkFS: rootFS{r}, Source: dir, closer: r}, nil
}

// osOpenFlags never block: a named pipe opened for reading waits for a
// writer without O_NONBLOCK, and a terminal must not become ours.
const osOpenFlags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY

// rootFS reads a directory through os.Root, which keeps every path, and
// every link it follows, inside the directory. Unlike os.Root's own FS it
// opens without blocking and refuses what is neither a regular file nor a
// directory.
type rootFS struct{ r *os.Root }

func (f rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	file, err := f.r.OpenFile(name, osOpenFlags, 0)
	if err != nil {
		// A socket cannot be opened at all (ENXIO): say what it is.
		if errors.Is(err, syscall.ENXIO) {
			if fi, serr := f.r.Lstat(name); serr == nil {
				if e := notRegular(fi.Mode()); e != nil {
					return nil, &fs.PathError{Op: "open", Path: name, Err: e}
				}
			}
		}
		return nil, err
	}
	fi, err := file.Stat()
	if err == nil {
		err = notRegular(fi.Mode())
	}
	if err != nil {
		file.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fserr.Cause(err)}
	}
	return file, nil
}

func (f rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	ents, err := file.(*os.File).ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fserr.Cause(err)}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

func (f rootFS) ReadLink(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return f.r.Readlink(name)
}

func (f rootFS) Lstat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrInvalid}
	}
	return f.r.Lstat(name)
}

func (f rootFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	return f.r.Stat(name)
}

// notRegular is nil for a regular file or a directory, and ErrNotRegular
// saying what it is for anything else.
func notRegular(m fs.FileMode) error {
	if t := m.Type(); t == 0 || t == fs.ModeDir {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotRegular, fserr.TypeName(m))
}

// OpenCapture reads the capture file name into memory. A named pipe,
// socket or device is refused (ErrNotRegular), never waited on.
func OpenCapture(name string) (*Root, error) {
	f, err := os.OpenFile(name, osOpenFlags, 0)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			if fi, serr := os.Stat(name); serr == nil {
				if e := notRegular(fi.Mode()); e != nil {
					err = &fs.PathError{Op: "open", Path: name, Err: e}
				}
			}
		}
		return nil, fmt.Errorf("open sysfs capture: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil {
		err = notRegular(fi.Mode())
	}
	if err != nil {
		return nil, fmt.Errorf("open sysfs capture: %w", &fs.PathError{Op: "open", Path: name, Err: fserr.Cause(err)})
	}
	m, err := ReadCapture(f)
	if err != nil {
		return nil, fmt.Errorf("open sysfs capture %s: %w", name, err)
	}
	return &Root{ReadLinkFS: m, Source: name}, nil
}

// ReadCapture parses a capture from r into a MemFS, with the capture's
// note (MemFS.Note).
func ReadCapture(r io.Reader) (*MemFS, error) {
	c, err := decodeCapture(bufio.NewReader(r))
	if err != nil {
		return nil, err
	}
	m, err := NewMemFS(c.Entries)
	if err != nil {
		return nil, err
	}
	m.note = c.Note
	return m, nil
}
