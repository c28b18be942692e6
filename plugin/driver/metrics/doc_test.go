package metrics

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsDocumented: every metric the plugin's own collectors and its
// EFA exporter describe is named in docs/operations.md, and every efakit
// metric the reference and task pages name exists: a metric renamed,
// added or removed without its documentation fails here.
func TestMetricsDocumented(t *testing.T) {
	descs := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range append(New().Own(), NewEFA(nil, func() []Target { return nil })) {
			c.Describe(descs)
		}
		close(descs)
	}()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		if s := fq.FindStringSubmatch(d.String()); s != nil {
			names[s[1]] = true
		}
	}
	require.Greater(t, len(names), 20)
	ops, err := os.ReadFile("../../../docs/operations.md")
	require.NoError(t, err)
	var missing []string
	for n := range names {
		if !strings.Contains(string(ops), "`"+n+"`") && !strings.Contains(string(ops), "`"+n+"{") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "metrics docs/operations.md does not name")

	named := regexp.MustCompile("efakit_(?:plugin|efa)_[a-z_]*[a-z]")
	for _, page := range []string{"operations.md", "troubleshooting.md", "plugin.md", "install.md", "upgrade.md", "versions.md", "migrate.md"} {
		b, err := os.ReadFile("../../../docs/" + page)
		require.NoError(t, err)
		for _, n := range named.FindAllString(string(b), -1) {
			assert.True(t, names[n], "docs/%s names %s, which no collector describes", page, n)
		}
	}
}
