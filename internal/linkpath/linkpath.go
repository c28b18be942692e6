// Package linkpath holds the path rules the sysfs roots (sysfs) and the
// reader that resolves links in them (internal/sysread) share.
package linkpath

import "strings"

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
