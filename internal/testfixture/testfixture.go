// Package testfixture holds what the tests of several packages share: the
// list of bundled sysfs captures and a file system that counts questions.
package testfixture

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Captures returns the capture files of testdata/sysfs by instance type;
// top is the path from the calling package to the module root ("..").
func Captures(tb testing.TB, top string) map[string]string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(top, "testdata", "sysfs", "*.sysfs"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no captures under %s/testdata/sysfs: %v", top, err)
	}
	out := make(map[string]string, len(paths))
	for _, p := range paths {
		out[strings.TrimSuffix(filepath.Base(p), ".sysfs")] = p
	}
	return out
}

// CountFS counts every Open, ReadLink and Lstat by path, as "open <path>".
// It hides the wrapped file system's optional interfaces, so the Reader
// takes its general path through it.
type CountFS struct {
	fs.ReadLinkFS
	mu    sync.Mutex
	calls map[string]int
}

// NewCountFS wraps fsys.
func NewCountFS(fsys fs.ReadLinkFS) *CountFS {
	return &CountFS{ReadLinkFS: fsys, calls: map[string]int{}}
}

func (c *CountFS) count(k string) {
	c.mu.Lock()
	c.calls[k]++
	c.mu.Unlock()
}

// Calls returns a copy of the counts.
func (c *CountFS) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// Open counts and opens.
func (c *CountFS) Open(n string) (fs.File, error) { c.count("open " + n); return c.ReadLinkFS.Open(n) }

// ReadLink counts and reads the link.
func (c *CountFS) ReadLink(n string) (string, error) {
	c.count("readlink " + n)
	return c.ReadLinkFS.ReadLink(n)
}

// Lstat counts and describes.
func (c *CountFS) Lstat(n string) (fs.FileInfo, error) {
	c.count("lstat " + n)
	return c.ReadLinkFS.Lstat(n)
}
