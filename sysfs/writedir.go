package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteDir unpacks entries under dir, creating files, directories and
// symbolic links as captured: the tree a directory root or another tool
// (lspci -b, ghw, procfs) can read. Permission bits are applied last, so a
// write-only attribute stays write-only.
func WriteDir(dir string, entries []Entry) error {
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		switch e.Kind {
		case KindDir:
			err = os.MkdirAll(p, 0o755)
		case KindFile:
			err = os.WriteFile(p, e.Data, 0o644)
		case KindLink:
			err = os.Symlink(e.Target, p)
		default:
			err = fmt.Errorf("unknown kind %q", string(e.Kind))
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", e.Path, err)
		}
	}
	for _, e := range entries {
		if e.Kind == KindLink {
			continue
		}
		if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(e.Path)), e.perm()); err != nil {
			return fmt.Errorf("unpack %s: %w", e.Path, err)
		}
	}
	return nil
}
