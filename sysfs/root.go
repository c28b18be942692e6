package sysfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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
		return OpenDir(name)
	}
	return OpenCapture(name)
}

// OpenDir opens the directory dir as a sysfs root. On Linux every open goes
// through openat2(2) confined to dir and refusing symbolic links, so even a
// caller that skips the Reader cannot be led out of the root; where openat2
// is missing, os.Root gives the same guarantee more slowly.
func OpenDir(dir string) (*Root, error) {
	if d, err := openDirFS(dir); err == nil {
		return &Root{ReadLinkFS: d, Source: dir, closer: d}, nil
	} else if !errors.Is(err, errNoOpenat2) {
		return nil, fmt.Errorf("open sysfs root: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open sysfs root: %w", err)
	}
	return &Root{ReadLinkFS: r.FS().(fs.ReadLinkFS), Source: dir, closer: r}, nil
}

// OpenCapture reads the capture file name into memory.
func OpenCapture(name string) (*Root, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open sysfs capture: %w", err)
	}
	defer f.Close()
	m, err := ReadCapture(f)
	if err != nil {
		return nil, fmt.Errorf("open sysfs capture %s: %w", name, err)
	}
	return &Root{ReadLinkFS: m, Source: name}, nil
}

// ReadCapture parses a capture from r into a MemFS.
func ReadCapture(r io.Reader) (*MemFS, error) {
	es, err := ParseCapture(bufio.NewReader(r))
	if err != nil {
		return nil, err
	}
	return NewMemFS(es)
}
