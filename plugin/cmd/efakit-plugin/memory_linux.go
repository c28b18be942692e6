package main

import "golang.org/x/sys/unix"

// pageOut asks the kernel to reclaim the pages of [addr, addr+n) now
// (MADV_PAGEOUT, Linux 5.4). A file page is dropped and read again from the
// file on its next use; the kernel does so only for pages no other process
// maps, of a file the process owns or may write (the chart runs the plugin
// as root, the image's files are root's). A page the process wrote is never
// dropped, so no content is lost.
func pageOut(addr, n uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, addr, n, unix.MADV_PAGEOUT); e != 0 {
		return e
	}
	return nil
}
