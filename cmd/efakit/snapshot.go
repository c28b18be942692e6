package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/efakit/efakit/internal/atomicfile"
	"github.com/efakit/efakit/snapshot"
	"github.com/efakit/efakit/sysfs"
)

func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs", "/sys", "sysfs `root` to capture: a directory or a capture file")
	out := fl.String("o", "", "capture `file` to write (- for standard output)")
	unpack := fl.String("unpack", "", "also unpack the capture into this `directory` (must not exist)")
	noScrub := fl.Bool("no-scrub", false, "keep MAC addresses, GIDs and GUIDs as read")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *out == "" && *unpack == "" {
		fmt.Fprintln(stderr, "efakit snapshot: -o FILE or --unpack DIR is required")
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit snapshot: %v\n", err)
		return 1
	}
	defer r.Close()
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
	if *unpack != "" {
		if _, err := os.Lstat(*unpack); err == nil {
			fmt.Fprintf(stderr, "efakit snapshot: %s exists\n", *unpack)
			return 1
		}
		if err := sysfs.WriteDir(*unpack, res.Entries); err != nil {
			fmt.Fprintf(stderr, "efakit snapshot: %v\n", err)
			return 1
		}
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(stderr, "efakit snapshot: skipped %s\n", s)
	}
	if snapErr != nil {
		printErrors(stderr, "efakit snapshot", snapErr)
		return 1
	}
	return 0
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
	return atomicfile.Write(name, b.Bytes(), atomicfile.Options{})
}
