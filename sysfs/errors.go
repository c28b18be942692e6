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

	"github.com/efakit/efakit/internal/linkpath"
	"github.com/efakit/efakit/internal/names"
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
	ErrEscapesRoot = linkpath.ErrEscapesRoot
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

// Error is the error for one device, node or file that a reader of efakit
// could not read or understand: every package (pcie, efa, neuron, host)
// returns it, joined with the others, next to the devices it did read.
// Branch on it with errors.As; its cause (Err) unwraps to the sentinels
// above and to fs.ErrNotExist.
type Error struct {
	// Subsystem is the reader: "pci", "efa", "neuron" or "host".
	Subsystem string
	// Device is the device or node, as the subsystem names it: a PCI
	// address ("0000:10:1c.0"), an RDMA device ("rdmap16s27"), a Neuron
	// class device ("neuron3"), a NUMA node ("node 1"); empty for the
	// subsystem as a whole (a class directory, the DMI product name).
	Device string
	// File is the path, relative to the sysfs root, that failed.
	File string
	// Err is the cause.
	Err error
}

// Error prints "<subsystem> <device>: <file>: <cause>", each part in one
// line (a name or cause that is not printable is quoted).
func (e *Error) Error() string {
	label := e.Subsystem
	if e.Device != "" {
		if label != "" {
			label += " "
		}
		label += names.Printable(e.Device)
	}
	cause := "<nil>"
	if e.Err != nil {
		cause = e.Err.Error()
	}
	return fmt.Sprintf("%s: %s: %s", label, names.Printable(e.File), names.Printable(cause))
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
