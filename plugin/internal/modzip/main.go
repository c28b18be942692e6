// Command modzip packs the committed tree (git HEAD) as the Go module zip
// that `go get` would download, and checks that it is valid and still holds
// every sysfs fixture: sysfs paths are full of ':' and symlinks, which a
// module zip refuses, which is why fixtures are capture files.
//
//	go run ./internal/modzip [-rev HEAD]
package main

import (
	"archive/zip"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/efakit/efakit/sysfs"
)

func main() {
	rev := flag.String("rev", "HEAD", "git revision to pack")
	flag.Parse()
	if err := run(*rev); err != nil {
		fmt.Fprintln(os.Stderr, "modzip:", err)
		os.Exit(1)
	}
}

func run(rev string) error {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("not in a git work tree: %w", err)
	}
	root := strings.TrimSpace(string(top))
	m := module.Version{Path: "github.com/efakit/efakit", Version: "v0.0.0-00010101000000-000000000000"}
	var buf bytes.Buffer
	if err := modzip.CreateFromVCS(&buf, m, root, rev, ""); err != nil {
		return fmt.Errorf("pack %s: %w", rev, err)
	}
	tmp, err := os.CreateTemp("", "efakit-modzip-*.zip")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		return err
	}
	tmp.Close()
	if _, err := modzip.CheckZip(m, tmp.Name()); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		return err
	}
	inZip := map[string]*zip.File{}
	for _, f := range zr.File {
		inZip[strings.TrimPrefix(f.Name, m.Path+"@"+m.Version+"/")] = f
	}
	// Every committed fixture is in the zip and opens as a sysfs root.
	ls, err := exec.Command("git", "-C", root, "ls-tree", "-r", "--name-only", rev, "testdata/sysfs").Output()
	if err != nil {
		return err
	}
	fixtures := 0
	for _, p := range strings.Fields(string(ls)) {
		if path.Ext(p) != ".sysfs" {
			continue
		}
		f, ok := inZip[p]
		if !ok {
			return fmt.Errorf("fixture %s is committed but not in the module zip", p)
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		_, err = sysfs.ReadCapture(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("fixture %s in the module zip: %w", p, err)
		}
		fixtures++
	}
	if fixtures == 0 {
		return fmt.Errorf("no fixtures under testdata/sysfs at %s", rev)
	}
	fmt.Printf("modzip: %s packs as a valid module zip: %d files, %d bytes, %d fixtures readable\n", rev, len(zr.File), buf.Len(), fixtures)
	return nil
}
