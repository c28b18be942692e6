package pcie

import "github.com/efakit/efakit/internal/names"

// ErrBadName is the cause when a name or a text attribute read from sysfs
// cannot be printed or published as it is: a control character (a newline,
// a tab, DEL, C1), invalid UTF-8, or a '/' or space in a name. The error
// quotes the name, so it stays one line.
var ErrBadName = names.ErrBadName
