package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
)

const dashboardFile = "../../../deployments/grafana/efakit-dashboard.json"

// promqlWords are PromQL's keywords and the grouping words whose
// parenthesised list names labels, not metrics.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	// aggregations, whose by or without may come before the parentheses
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "group": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
}

// promqlGrouping are the words followed by a list of labels.
var promqlGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names a PromQL expression (or a Grafana
// label_values query) reads: identifiers outside strings, label matchers
// {...}, ranges [...] and grouping lists, that are not keywords and do not
// call a function. It fails on unbalanced brackets or an unterminated
// string, so a broken expression does not pass for one that names nothing.
func metricNames(expr string) ([]string, error) {
	var out []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	var stack []byte
	skipString := func(i int) (int, error) {
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch {
			case expr[j] == '\\' && q != '`':
				j++
			case expr[j] == q:
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string in %q", expr)
	}
	// skipTo skips to the bracket that closes the one at i.
	skipTo := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(expr); {
			switch c := expr[j]; {
			case c == '"' || c == '\'' || c == '`':
				k, err := skipString(j)
				if err != nil {
					return 0, err
				}
				j = k
				continue
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
			j++
		}
		return 0, fmt.Errorf("unclosed %c in %q", open, expr)
	}
	next := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\n' || expr[i] == '\t') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '(':
			stack = append(stack, c)
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ) in %q", expr)
			}
			stack = stack[:len(stack)-1]
			i++
		case c == '}' || c == ']':
			return nil, fmt.Errorf("unbalanced %c in %q", c, expr)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++ // a number, or a duration such as 5m
			}
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				j, err := skipTo(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
				continue
			}
			for i < len(expr) && isPart(expr[i]) {
				i++ // a Grafana variable
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := next(j)
			switch {
			case promqlGrouping[strings.ToLower(word)] && k < len(expr) && expr[k] == '(':
				e, err := skipTo(k, '(', ')') // a list of labels
				if err != nil {
					return nil, err
				}
				j = e
			case promqlWords[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed ( in %q", expr)
	}
	return out, nil
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (node) (rate(efakit_efa_tx_bytes_total{node=~"$node", claim_name!=""}[$__rate_interval]))`: {"efakit_efa_tx_bytes_total"},
		`histogram_quantile(0.99, sum by (le, op) (rate(a_bucket{x="}"}[5m]))) > bool 1`:                   {"a_bucket"},
		`sum(x) without (device) / on (node) group_left (pod) y offset 5m or z`:                            {"x", "y", "z"},
		`label_values(efakit_efa_port_active{node=~"$node"}, device)`:                                      {"efakit_efa_port_active", "device"},
		`1 - up{job="a"} * 1e9`: {"up"},
	} {
		got, err := metricNames(expr)
		require.NoError(t, err, expr)
		assert.Equal(t, want, got, expr)
	}
	for _, bad := range []string{`rate(x[5m]`, `x{a="b"`, `sum(x))`, `x{a="b}`} {
		_, err := metricNames(bad)
		assert.Error(t, err, bad)
	}
}

// exported gathers the plugin's whole registry (registry: every vector of
// its own with a series, a prepared claim) after a read of the p5 fixture
// with every counter of the catalogue and an unreadable one, and returns
// every series name a query can use (a histogram's _bucket, _sum and
// _count) with the labels its series carry.
func exported(t *testing.T) map[string]map[string]bool {
	t.Helper()
	// Every counter of the catalogue (p5's efa lacks the retransmit ones
	// newer hardware has), and one that does not parse.
	files := map[string]string{}
	for _, c := range efa.KnownCounters() {
		if c.Port {
			files["ports/1/hw_counters/"+c.Name] = "1\n"
		} else {
			files["hw_counters/"+c.Name] = "1\n"
		}
	}
	files["ports/1/hw_counters/rx_drops"] = "x\n"
	mfs, err := registry(t, files).Gather()
	require.NoError(t, err)
	out := map[string]map[string]bool{}
	for _, mf := range mfs {
		names := []string{mf.GetName()}
		if mf.GetType().String() == "HISTOGRAM" {
			names = []string{mf.GetName() + "_bucket", mf.GetName() + "_sum", mf.GetName() + "_count"}
		}
		for _, n := range names {
			out[n] = map[string]bool{}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					out[n][l.GetName()] = true
				}
			}
		}
	}
	return out
}

// TestDashboard: the Grafana dashboard is valid JSON, every query in it
// names only metrics the plugin exports (a renamed metric fails here), its
// label_values queries name labels those metrics carry, and every variable
// it uses is defined.
func TestDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d map[string]any
	require.NoError(t, json.Unmarshal(raw, &d))

	var exprs, strs []string
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(k, x)
			}
		case []any:
			for _, x := range v {
				walk(key, x)
			}
		case string:
			strs = append(strs, v)
			if key == "expr" || key == "definition" {
				exprs = append(exprs, v)
			}
		}
	}
	walk("", d)
	require.NotEmpty(t, exprs)

	have := exported(t)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)
	used := map[string]bool{}
	for _, e := range exprs {
		q, label := e, ""
		if m := labelValues.FindStringSubmatch(e); m != nil {
			q, label = m[1], m[2]
		}
		names, err := metricNames(q)
		require.NoError(t, err)
		require.NotEmpty(t, names, "%q names no metric", e)
		for _, n := range names {
			used[n] = true
			if _, ok := have[n]; !ok {
				t.Errorf("%q names %s, which the plugin does not export", e, n)
				continue
			}
			// node is the scrape's target label (docs/operations.md's relabelling).
			if label != "" && label != "node" {
				assert.True(t, have[n][label], "%q: %s has no label %s", e, n, label)
			}
		}
	}
	for _, want := range []string{"efakit_efa_tx_bytes_total", "efakit_efa_rdma_read_bytes_total", "efakit_efa_retransmitted_packets_total",
		"efakit_efa_port_active", "efakit_plugin_call_seconds_bucket", "efakit_plugin_calls_total"} {
		assert.True(t, used[want], "the dashboard shows %s", want)
	}

	var defined []string
	for _, v := range d["templating"].(map[string]any)["list"].([]any) {
		defined = append(defined, v.(map[string]any)["name"].(string))
	}
	ref := regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)
	for _, s := range strs {
		for _, m := range ref.FindAllStringSubmatch(s, -1) {
			name := m[1] + m[2] + m[3]
			if strings.HasPrefix(name, "__") {
				continue // Grafana's own: $__rate_interval, $__interval
			}
			assert.True(t, slices.Contains(defined, name), "variable $%s used in %q is not defined", name, s)
		}
	}
}
