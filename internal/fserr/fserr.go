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
