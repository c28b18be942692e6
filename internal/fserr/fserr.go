// Package fserr strips the *fs.PathError an fs.FS wraps its errors in:
// the readers name the device and the file themselves.
package fserr

import (
	"errors"
	"io/fs"
)

// Cause returns err without its *fs.PathError: its path (root-relative and
// already named by the caller's error) and operation.
func Cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// TypeName names the type of a file for a message: "a regular file", "a
// directory", "a named pipe" and so on.
func TypeName(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "a file of type " + t.String()
	}
}
