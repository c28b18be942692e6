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
}

// Write replaces path with data: a temporary file in the same directory
// (".<name>.*.tmp", which neither CDI caches nor globs for the real name
// pick up), written, synced, checked, renamed over path, and the directory
// synced so that the rename survives a crash. The temporary file is removed
// on any error.
func Write(path string, data []byte, o Options) (err error) {
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
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(o.Perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if o.Check != nil {
		if err := o.Check(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
