package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGoldenOutput compares, per fixture, the topology matrix, its JSON and
// list's JSON with the golden files. Run with -update after a deliberate
// change and read the diff: these files are what a user sees.
func TestGoldenOutput(t *testing.T) {
	// Not parallel: the output names devices from pci.ids when the machine
	// has one, and PCIDB_PATH pins it to the test's small file.
	t.Setenv("PCIDB_PATH", "../../../testdata/pci.ids")
	paths, err := filepath.Glob("../../../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".sysfs")
		for _, tc := range []struct {
			suffix string
			args   []string
		}{
			{".topo.txt", []string{"topo", "--sysfs", p}},
			{".topo.json", []string{"topo", "--sysfs", p, "-o", "json"}},
			{".list.json", []string{"list", "--sysfs", p, "-o", "json"}},
			{".slices.yaml", []string{"slices", "--sysfs", p, "--node", "node-1"}},
			{".claims.yaml", []string{"claims", "--sysfs", p}},
			{".claims-exclusive.yaml", []string{"claims", "--sysfs", p, "--groups", "exclusive"}},
			{".claims-example-pods.yaml", []string{"claims", "--sysfs", p, "--example-pods"}},
		} {
			t.Run(name+tc.suffix, func(t *testing.T) {
				code, out, errOut := runCLI(tc.args...)
				require.Equal(t, 0, code, errOut)
				file := filepath.Join("..", "..", "..", "testdata", "golden", name+tc.suffix)
				if *update {
					require.NoError(t, os.WriteFile(file, []byte(out), 0o644))
				}
				want, err := os.ReadFile(file)
				require.NoError(t, err, "run go test ./cmd/efakit -update to create it")
				if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(out, "\n")); diff != "" {
					t.Errorf("%s differs from the golden file (-want +got):\n%s", file, diff)
				}
			})
		}
	}
}
