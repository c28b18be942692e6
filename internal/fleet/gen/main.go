// Command gen writes the chart's default instance types
// (deployments/helm/efakit/values.yaml) and the list of docs/instance-types.md
// from the table of package fleet, between their marker lines.
//
//	go run ./internal/fleet/gen          # from the module root
//	go run ./internal/fleet/gen -check   # fail if either file differs
package main

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/efakit/efakit/internal/atomicfile"
	"github.com/efakit/efakit/internal/fleet"
)

// files are the generated files, relative to the module root, with the
// block each one holds.
func files() map[string]string {
	return map[string]string{
		"deployments/helm/efakit/values.yaml": fleet.ValuesBlock(),
		"docs/instance-types.md":              fleet.DocsBlock(),
	}
}

func main() {
	root := flag.String("root", ".", "the module root")
	check := flag.Bool("check", false, "only check that the files are up to date")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "fleet/gen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	// Every file is spliced before any is written: a marker missing from
	// one leaves both as they were.
	out := map[string][]byte{}
	for name, block := range files() {
		path := filepath.Join(root, name)
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b, err := fleet.Splice(old, block)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !bytes.Equal(old, b) {
			out[path] = b
		}
	}
	for _, path := range slices.Sorted(maps.Keys(out)) {
		if check {
			return fmt.Errorf("%s is out of date: run `go run ./internal/fleet/gen`", path)
		}
		if err := atomicfile.Write(path, out[path], atomicfile.Options{}); err != nil {
			return err
		}
	}
	return nil
}
