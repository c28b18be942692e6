package main

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// libraryPath is the library's module path.
const libraryPath = "github.com/efakit/efakit"

// treeFile is a file of the work tree, for modzip.Create.
type treeFile struct{ root, rel string }

func (f treeFile) Path() string                 { return f.rel }
func (f treeFile) Lstat() (fs.FileInfo, error)  { return os.Lstat(filepath.Join(f.root, f.rel)) }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(filepath.Join(f.root, f.rel)) }

// zipWorkTree packs the library's module zip at version v from the work
// tree at root: the files git tracks, as they are on disk now, without
// the directories that are modules of their own (plugin/, bench/, ...),
// as go get would download it once committed.
func zipWorkTree(root, v string) ([]byte, module.Version, error) {
	m := module.Version{Path: libraryPath, Version: v}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return nil, m, err
	}
	names := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	var nested []string
	for _, n := range names {
		if d, ok := strings.CutSuffix(n, "/go.mod"); ok {
			nested = append(nested, d+"/")
		}
	}
	var files []modzip.File
	for _, n := range names {
		inNested := false
		for _, d := range nested {
			inNested = inNested || strings.HasPrefix(n, d)
		}
		if _, err := os.Lstat(filepath.Join(root, n)); err != nil || inNested {
			continue // removed in the work tree, or another module's
		}
		files = append(files, treeFile{root, n})
	}
	var buf bytes.Buffer
	err = modzip.Create(&buf, m, files)
	return buf.Bytes(), m, err
}
