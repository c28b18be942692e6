package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/efakit/efakit/internal/linkpath"
)

// WriteDir unpacks entries into the new directory dir, creating files,
// directories and symbolic links as captured: the tree a directory root or
// another tool (lspci -b, ghw, procfs) can read. dir must not exist (its
// parents are made as needed); everything is written beneath it through
// os.Root, in the directory made here, so a link or a rename by someone
// else cannot redirect a write. An entry that cannot be written safely (a
// link whose target is absolute, climbs above dir from the link's place or
// has ".." after a name; an entry under a link or a file; an invalid or
// repeated path) is left out with an error naming it, and the rest is
// written. Permission bits are applied last, deepest first, so a
// write-only attribute stays write-only.
func WriteDir(dir string, entries []Entry) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()
	// The directory made above, not a link put in its place since.
	made, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if opened, err := root.Stat("."); err != nil || !os.SameFile(made, opened) {
		return fmt.Errorf("unpack: %s was replaced while it was being made", dir)
	}

	es, errs := safeEntries(entries)
	for _, e := range es {
		p := filepath.FromSlash(e.Path)
		if d := filepath.Dir(p); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return errors.Join(append(errs, fmt.Errorf("unpack %q: %w", e.Path, err))...)
			}
		}
		var err error
		switch e.Kind {
		case KindDir:
			err = root.Mkdir(p, 0o755)
			if errors.Is(err, fs.ErrExist) {
				// made already as the parent of an earlier entry
				if fi, lerr := root.Lstat(p); lerr == nil && fi.IsDir() {
					err = nil
				}
			}
		case KindFile:
			// O_EXCL: never through a link, never over anything.
			var f *os.File
			f, err = root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				_, err = f.Write(e.Data)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case KindLink:
			err = root.Symlink(e.Target, p)
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("unpack %q: %w", e.Path, err))...)
		}
	}
	for _, e := range slices.Backward(es) {
		if e.Kind == KindLink {
			continue
		}
		if err := root.Chmod(filepath.FromSlash(e.Path), e.perm()); err != nil {
			return errors.Join(append(errs, fmt.Errorf("unpack %q: %w", e.Path, err))...)
		}
	}
	return errors.Join(errs...)
}

// safeEntries returns the entries that can be written, sorted by path (a
// directory before what it holds), and an error for each of the others.
func safeEntries(entries []Entry) ([]Entry, []error) {
	es := slices.Clone(entries)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	kinds := make(map[string]Kind, len(es))
	left := make(map[string]bool) // paths left out: nothing goes beneath them
	var out []Entry
	var errs []error
	for _, e := range es {
		err := checkEntry(e, kinds, left)
		if err != nil {
			errs = append(errs, fmt.Errorf("unpack %q: %w", e.Path, err))
			left[e.Path] = true
			continue
		}
		kinds[e.Path] = e.Kind
		out = append(out, e)
	}
	return out, errs
}

func checkEntry(e Entry, kinds map[string]Kind, left map[string]bool) error {
	if !fs.ValidPath(e.Path) || e.Path == "." {
		return errors.New("invalid path")
	}
	if _, ok := kinds[e.Path]; ok || left[e.Path] {
		return errors.New("path given twice")
	}
	for d := path.Dir(e.Path); d != "."; d = path.Dir(d) {
		if left[d] {
			return fmt.Errorf("under %s, which is left out", d)
		}
		switch kinds[d] {
		case KindLink:
			return fmt.Errorf("under the symbolic link %s", d)
		case KindFile:
			return fmt.Errorf("under the file %s", d)
		}
	}
	switch e.Kind {
	case KindDir, KindFile:
		return nil
	case KindLink:
		return linkpath.CheckLink(e.Path, e.Target)
	}
	return fmt.Errorf("unknown kind %q", string(e.Kind))
}
