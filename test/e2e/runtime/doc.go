// Package runtime pins the container runtime of the end-to-end tests' real
// node: containerd, its runc shim and ctr, and the CNI loopback plugin, all
// tools of this module built from the Go module proxy at the versions of
// go.mod. runc itself is Debian's package.
package runtime
