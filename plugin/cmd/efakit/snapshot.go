package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/snapshot"
	"github.com/efakit/efakit/sysfs"
)

func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("snapshot")
	root := fl.String("sysfs", "/sys", "sysfs `root` to capture: a directory or a capture file")
	out := fl.String("o", "", "capture `file` to write, in an existing directory, over nothing or a regular file (- for standard output)")
	unpack := fl.String("unpack", "", "also unpack the capture into this `directory` (must not exist)")
	noScrub := fl.Bool("no-scrub", false, "keep MAC addresses, GIDs and GUIDs as read")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	if *out == "" && *unpack == "" {
		fmt.Fprintln(stderr, "efakit snapshot: -o FILE or --unpack DIR is required")
		return 2
	}
	// Refused before reading anything; checked again when written.
	if *out != "" && *out != "-" {
		if err := checkReplaceable(*out); err != nil {
			fmt.Fprintf(stderr, "efakit snapshot: %v\n", err)
			return 1
		}
	}
	if *unpack != "" {
		if _, err := os.Lstat(*unpack); err == nil {
			fmt.Fprintf(stderr, "efakit snapshot: %s exists\n", *unpack)
			return 1
		}
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit snapshot: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit snapshot", r)
	res, snapErr := snapshot.Take(r, snapshot.Options{NoScrub: *noScrub})
	if res == nil {
		fmt.Fprintf(stderr, "efakit snapshot: %v\n", snapErr)
		return 1
	}
	header := []string{
		fmt.Sprintf("captured by efakit %s from %s on %s", version, *root, time.Now().UTC().Format(time.DateOnly)),
	}
	if !*noScrub {
		header = append(header, "MAC addresses, GIDs and GUIDs scrubbed")
	}
	if *out != "" {
		if err := writeCapture(*out, stdout, header, res.Entries); err != nil {
			fmt.Fprintf(stderr, "efakit snapshot: %v\n", err)
			return 1
		}
	}
	code := 0
	if *unpack != "" {
		// WriteDir makes the directory itself (it fails if something
		// is there by now) and writes only beneath it.
		if err := sysfs.WriteDir(*unpack, res.Entries); err != nil {
			printErrors(stderr, "efakit snapshot", err)
			code = 1
		}
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(stderr, "efakit snapshot: skipped %s\n", s)
	}
	if snapErr != nil {
		printErrors(stderr, "efakit snapshot", snapErr)
		return 1
	}
	return code
}

// writeCapture writes the capture to stdout ("-") or, atomically, to a
// file.
func writeCapture(name string, stdout io.Writer, header []string, es []sysfs.Entry) error {
	if name == "-" {
		return sysfs.WriteCapture(stdout, header, es)
	}
	var b bytes.Buffer
	if err := sysfs.WriteCapture(&b, header, es); err != nil {
		return err
	}
	return replaceFile(name, b.Bytes())
}

// replaceFile writes data to name: a temporary file in name's directory,
// synced and renamed over name, which must be a regular file or nothing
// (as root, renaming over -o /dev/null would make it a regular file). The
// directory must exist: a mistyped path is an error, not a new directory.
// Everything happens in the directory opened once, so a rename of it or
// of a parent cannot redirect the write.
func replaceFile(name string, data []byte) (err error) {
	d, base, err := openParent(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := replaceable(d, name, base); err != nil {
		return err
	}
	var tmp string
	var f *os.File
	for range 100 {
		tmp = "." + base + "." + strconv.FormatUint(rand.Uint64(), 36) + ".tmp"
		f, err = d.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			d.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	// Again just before the rename: what was checked may have changed
	// while the capture was taken.
	if err = replaceable(d, name, base); err != nil {
		return err
	}
	if err = d.Rename(tmp, base); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	dir, err := d.Open(".")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", name, err)
	}
	return nil
}

// checkReplaceable fails when replaceFile would refuse name.
func checkReplaceable(name string) error {
	d, base, err := openParent(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return replaceable(d, name, base)
}

// openParent opens the directory of name, which must exist.
func openParent(name string) (*os.Root, string, error) {
	dir, base := filepath.Split(name)
	if base == "" || base == "." || base == ".." {
		return nil, "", fmt.Errorf("write %s: not a file name", name)
	}
	if dir == "" {
		dir = "."
	}
	d, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("write %s: directory %s: %w", name, dir, fserr.Cause(err))
	}
	return d, base, nil
}

// replaceable is nil when base in d is a regular file or nothing.
func replaceable(d *os.Root, name, base string) error {
	fi, err := d.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, fserr.Cause(err))
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("write %s: %s, not a regular file: refused", name, fserr.TypeName(fi.Mode()))
	}
	return nil
}
