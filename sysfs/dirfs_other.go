//go:build !linux

package sysfs

import (
	"errors"
	"io/fs"
)

var errNoOpenat2 = errors.New("openat2 not available")

type dirFS struct{ fs.ReadLinkFS }

func (*dirFS) Close() error { return nil }

// openDirFS always defers to os.Root off Linux.
func openDirFS(string) (*dirFS, error) { return nil, errNoOpenat2 }
