// Package atomicfile replaces a file so that a reader, or a crash, sees the
// old content or the new, never a part: the CDI specs, the checkpoint and
// captures are written this way.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Durability says which fsyncs Write makes. A rename is atomic for every
// process of the running system without any: fsync only decides what a
// power loss or a kernel crash leaves on the disk.
type Durability int

const (
	// SyncAll syncs the file before the rename and the directory after
	// it: after a crash, path holds the new content if Write returned,
	// and the old or the new content, whole, if it did not.
	SyncAll Durability = iota
	// SyncFile syncs the file before the rename but not the directory:
	// after a crash, path holds the old or the new content, whole (the
	// rename itself may be lost).
	SyncFile
	// SyncNone makes no fsync: after a crash, path may hold a partial or
	// empty file. For files that a crash makes worthless anyway.
	SyncNone
)

// Options tune Write.
type Options struct {
	// Perm is the file's mode (0644 when zero).
	Perm fs.FileMode
	// DirPerm is the mode of a directory Write has to create (0755 when
	// zero).
	DirPerm fs.FileMode
	// Check, when set, sees the complete temporary file before it is
	// renamed into place; an error leaves the old file untouched.
	Check func(tmp string) error
	// Durability is SyncAll when zero.
	Durability Durability
	// Sync, when set, is called instead of (*os.File).Sync for each fsync
	// (the file's and the directory's): tests count them through it.
	Sync func(*os.File) error
}

func (o *Options) sync(f *os.File) error {
	if o.Sync != nil {
		return o.Sync(f)
	}
	return f.Sync()
}

// Write replaces path with data: a temporary file in the same directory
// (".<name>.*.tmp", which neither CDI caches nor globs for the real name
// pick up), written, synced, checked, renamed over path, and the directory
// synced so that the rename survives a crash (fewer fsyncs with
// o.Durability). The temporary file is removed on any error.
func Write(path string, data []byte, o Options) error {
	f, err := write(path, data, o)
	if err != nil {
		return err
	}
	return f.Close()
}

// WriteOpen is Write that returns the new file, open, once it is in place:
// as long as it stays open, no other file can take its inode number, so a
// caller can tell, comparing with os.SameFile, whether path was replaced
// since. The caller closes it.
func WriteOpen(path string, data []byte, o Options) (*os.File, error) {
	return write(path, data, o)
}

func write(path string, data []byte, o Options) (_ *os.File, err error) {
	if o.Perm == 0 {
		o.Perm = 0o644
	}
	if o.DirPerm == 0 {
		o.DirPerm = 0o755
	}
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, o.DirPerm); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return nil, err
	}
	tmp, renamed := f.Name(), false
	defer func() {
		if err != nil {
			_ = f.Close()
			if !renamed {
				_ = os.Remove(tmp)
			}
		}
	}()
	if _, err := f.Write(data); err != nil {
		return nil, err
	}
	if err := f.Chmod(o.Perm); err != nil {
		return nil, err
	}
	if o.Durability != SyncNone {
		if err := o.sync(f); err != nil {
			return nil, err
		}
	}
	if o.Check != nil {
		if err := o.Check(tmp); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	renamed = true
	if o.Durability == SyncAll {
		if err := syncDir(dir, &o); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func syncDir(dir string, o *Options) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = o.sync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
