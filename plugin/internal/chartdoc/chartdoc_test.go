package chartdoc

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/chart-values.md")

const (
	valuesFile = "../../../deployments/helm/efakit/values.yaml"
	docFile    = "../../../docs/chart-values.md"
)

// TestChartValuesDoc: docs/chart-values.md is the table Values makes of
// the chart's values.yaml, and every value there says what it is. Run with
// -update after a change to values.yaml.
func TestChartValuesDoc(t *testing.T) {
	b, err := os.ReadFile(valuesFile)
	require.NoError(t, err)
	vals, err := Values(b)
	require.NoError(t, err)
	for _, v := range vals {
		assert.NotEmpty(t, v.Meaning, "%s has no comment in values.yaml", v.Path)
	}
	want := header + Table(vals)
	if *update {
		require.NoError(t, os.WriteFile(docFile, []byte(want), 0o644))
	}
	got, err := os.ReadFile(docFile)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "run go test ./internal/chartdoc -update")
}

const header = "# Chart values\n\n" +
	"Every value of the chart (`deployments/helm/efakit/values.yaml`), its default and what it\n" +
	"does: made from values.yaml's comments by `go test ./internal/chartdoc -update`, which fails\n" +
	"when this page differs or a value has no comment. Set them with `--set` or `-f` at\n" +
	"`helm install`; [install](install.md) walks through the ones a node group needs.\n\n"

func TestValues(t *testing.T) {
	vals, err := Values([]byte(`# The image.
image:
  repository: ""   # required
  tag: ""
# Groups.
groups: none
health:
  # The window.
  window: 5m
list: [a, b, c, d, e]
resources:
  limits: {memory: 128Mi}
affinity: {}
`))
	require.NoError(t, err)
	assert.Equal(t, []Value{
		{Path: "image", Meaning: "The image."},
		{Path: "image.repository", Default: `""`, Meaning: "required"},
		{Path: "image.tag", Default: `""`},
		{Path: "groups", Default: "none", Meaning: "Groups."},
		{Path: "health.window", Default: "5m", Meaning: "The window."},
		{Path: "list", Default: "a list of 5"},
		{Path: "resources", Default: "{limits: {memory: 128Mi}}"},
		{Path: "affinity", Default: "{}"},
	}, vals)
}
