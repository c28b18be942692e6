// Package sysfs opens a Linux sysfs tree, live or captured, and reads it
// safely: every symbolic link is resolved inside the root, a link that leaves
// the root, loops or dangles is an error for that entry, and no file is read
// without a size bound.
//
// Every path in this package is relative to the sysfs root and slash
// separated: "bus/pci/devices", never "/sys/bus/pci/devices". The live
// machine is Open("/sys"); a capture file written by Snapshot is Open of that
// file. Both give an fs.ReadLinkFS, which every reader of efakit takes as
// its root.
package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
)

// MaxFileSize bounds every read. sysfs text attributes are at most one page
// (4 KiB); a file larger than this is damage, not data, and is reported with
// ErrTooLarge instead of being cut silently.
const MaxFileSize = 64 << 10

// maxLinkHops is the number of symbolic links followed while resolving one
// path, as the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// Errors a caller can branch on. They are wrapped in a *fs.PathError that
// names the offending entry.
var (
	// ErrEscapesRoot: a symbolic link (or "..") points outside the root.
	ErrEscapesRoot = errors.New("link leaves the sysfs root")
	// ErrLinkLoop: more than 40 links were followed while resolving a path.
	ErrLinkLoop = errors.New("too many levels of symbolic links")
	// ErrDanglingLink: a symbolic link points at nothing. It also matches
	// fs.ErrNotExist.
	ErrDanglingLink = fmt.Errorf("dangling symbolic link: %w", fs.ErrNotExist)
	// ErrTooLarge: a file holds more than MaxFileSize bytes.
	ErrTooLarge = fmt.Errorf("file larger than %d bytes", MaxFileSize)
	// ErrNotRegular: a named pipe, socket or device where sysfs has a
	// regular file or a directory. A directory root refuses to open one
	// (a named pipe would block the reader for ever); so does Open for a
	// capture path.
	ErrNotRegular = errors.New("not a regular file or directory")
)

// ErrLinkInPath is what OpenNoFollow and ReadDirNoFollow return for a path
// that holds a symbolic link: the caller resolves it step by step.
var ErrLinkInPath = errors.New("path holds a symbolic link")
