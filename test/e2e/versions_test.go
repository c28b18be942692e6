package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionsTable: each cell of docs/versions.md's table whose row names
// a feature gate is that gate's stage and default at the column's
// Kubernetes version, as the code of the Kubernetes this module pins says
// (test/e2e/k8s/cmd/featuregates).
func TestVersionsTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/versions.md")
	require.NoError(t, err)
	lines := strings.Split(string(doc), "\n")
	var header []string
	gateRe := regexp.MustCompile("\\(`([A-Z][A-Za-z]+)`")
	type row struct {
		gate  string
		cells []string
	}
	var rows []row
	for _, l := range lines {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		c := strings.Split(strings.Trim(l, "|"), "|")
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		if header == nil && c[0] == "feature (gate)" {
			header = c
			continue
		}
		if m := gateRe.FindStringSubmatch(c[0]); m != nil && header != nil {
			rows = append(rows, row{m[1], c[1:5]})
		}
	}
	require.Equal(t, []string{"1.34", "1.35", "1.36", "1.37"}, header[1:5])
	require.NotEmpty(t, rows)
	args := []string{"run", "./cmd/featuregates"}
	for _, r := range rows {
		args = append(args, r.gate)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "k8s"
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var specs map[string][]struct {
		Version    string `json:"version"`
		Default    bool   `json:"default"`
		PreRelease string `json:"preRelease"`
	}
	require.NoError(t, json.Unmarshal(out, &specs))
	for _, r := range rows {
		for i, v := range header[1:5] {
			want := "-"
			for _, s := range specs[r.gate] {
				if minorOf(s.Version) > minorOf(v) {
					break
				}
				switch {
				case s.PreRelease == "":
					want = "GA"
				case s.Default:
					want = strings.ToLower(s.PreRelease) + ", on"
				default:
					want = strings.ToLower(s.PreRelease) + ", off"
				}
			}
			assert.Equal(t, want, r.cells[i], "%s at %s", r.gate, v)
		}
	}
}

// minorOf is the minor number of a "1.N" version.
func minorOf(v string) int {
	var major, minor int
	_, _ = fmt.Sscanf(v, "%d.%d", &major, &minor)
	return minor
}
