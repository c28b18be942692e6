// Package linkpath holds the path rules the sysfs roots (sysfs) and the
// reader that resolves links in them (internal/sysread) share.
package linkpath

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/efakit/efakit/internal/names"
)

// ErrEscapesRoot is sysfs.ErrEscapesRoot, here so that CheckLink can wrap
// it: a symbolic link (or "..") points outside the root.
var ErrEscapesRoot = errors.New("link leaves the sysfs root")

// ErrLinkInPath is what a root's OpenNoFollow and ReadDirNoFollow return
// for a path that holds a symbolic link: the reader (internal/sysread)
// resolves it step by step.
var ErrLinkInPath = errors.New("path holds a symbolic link")

// Split splits a clean slash-separated path into its components; none for
// "" or ".".
func Split(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

// ClimbsAfterName reports whether target has ".." after a name ("m/.."),
// which the kernel applies after following m if m is a link: joining it
// lexically would give another answer. sysfs's own links never do.
func ClimbsAfterName(target string) bool {
	named := false
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return true
			}
		default:
			named = true
		}
	}
	return false
}

// CheckLink refuses a symbolic link at p (a root-relative path) whose
// target could lead out of the root once the tree is on disk: an absolute
// target, one that climbs ("..") above the root from p's directory, or one
// with ".." after a name, which the kernel applies after following that
// name if it is a link, so that no look at the target alone can bound it.
// The kernel's own sysfs links ("../../../devices/...") all pass. The
// error wraps ErrEscapesRoot and names the link and its target.
func CheckLink(p, target string) error {
	if !fs.ValidPath(p) || p == "." {
		return fmt.Errorf("link %q: invalid path", p)
	}
	refuse := func(why string) error {
		return fmt.Errorf("%w (%s -> %s): %s", ErrEscapesRoot, names.Printable(p), names.Printable(target), why)
	}
	if target == "" {
		return fmt.Errorf("link %s: empty target", names.Printable(p))
	}
	if path.IsAbs(target) {
		return refuse("absolute target")
	}
	if ClimbsAfterName(target) {
		return refuse(`".." after a name`)
	}
	if j := path.Join(path.Dir(p), target); j == ".." || strings.HasPrefix(j, "../") {
		return refuse("climbs above the root")
	}
	return nil
}
