// Package names checks the names and texts efakit reads from sysfs and
// prints or publishes: every reader (pcie, efa, host, neuron, gpudirect)
// and the plugin check them here, in one place.
package names

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// ErrBadName is the cause when a name or a text attribute read from sysfs
// cannot be printed or published as it is.
var ErrBadName = errors.New("not a printable name")

// maxName is the longest file name Linux allows (NAME_MAX).
const maxName = 255

// CheckName checks a name that efakit prints or publishes and that comes
// from the tree: a device, driver or interface name read from a directory
// listing, a link or a file. It must be 1-255 bytes of valid UTF-8 with
// only printable characters, no space and no '/'. A control character
// (a newline, a tab, DEL, C1) would forge a row of `efakit list` or a line
// of a log, and a ResourceSlice attribute would carry it. The error quotes
// the name, so it stays one line.
func CheckName(s string) error {
	if err := CheckText(s); err != nil {
		return err
	}
	for _, r := range s {
		if r == ' ' || r == '/' {
			return fmt.Errorf("%q: %w (%U in a name)", clip(s), ErrBadName, r)
		}
	}
	switch {
	case s == "":
		return fmt.Errorf(`"": %w (empty)`, ErrBadName)
	case len(s) > maxName:
		return fmt.Errorf("%q: %w (more than %d bytes)", clip(s), ErrBadName, maxName)
	}
	return nil
}

// CheckText checks a free-text attribute that efakit prints or publishes
// (a DMI product name, a firmware version, a port state): valid UTF-8 with
// only printable characters and spaces. The error quotes the text.
func CheckText(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%q: %w (not valid UTF-8)", clip(s), ErrBadName)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%q: %w (%U is a control or format character)", clip(s), ErrBadName, r)
		}
	}
	return nil
}

// Printable returns s as it is when CheckText accepts it, and quoted (%q)
// otherwise. Errors use it for the paths and causes they print, which can
// hold a name or link target of a damaged tree, so that every error stays
// one line.
func Printable(s string) string {
	if CheckText(s) == nil {
		return s
	}
	return strconv.Quote(s)
}

// clip shortens a long text for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
