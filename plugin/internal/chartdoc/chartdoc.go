// Package chartdoc makes the reference table of the chart's values from
// values.yaml: every value with its default and the comment above it. Its
// test keeps docs/chart-values.md current and fails on a value without a
// comment.
package chartdoc

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Value is one value of the chart: its dotted path, default and meaning.
type Value struct {
	Path    string
	Default string // as YAML, in flow style
	Meaning string // the comments above it and beside it, one line
}

// objects are values taken whole: a pod spec's own objects, passed
// through to the DaemonSet.
var objects = map[string]bool{"affinity": true, "resources": true}

// maxListed is the longest list shown whole; a longer one is counted.
const maxListed = 4

// Values reads values.yaml and returns its values in file order. A
// mapping's own comment is kept for its values that have none.
func Values(values []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml is not a mapping")
	}
	var out []Value
	err := walk(doc.Content[0], "", &out)
	return out, err
}

func walk(m *yaml.Node, prefix string, out *[]Value) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		p := prefix + k.Value
		meaning := comment(k.HeadComment, k.LineComment, v.LineComment)
		if i == 0 && prefix == "" {
			// The file's first comment is the first key's.
			meaning = comment(m.HeadComment, meaning)
		}
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !objects[k.Value] {
			if meaning != "" {
				*out = append(*out, Value{Path: p, Meaning: meaning})
			}
			if err := walk(v, p+".", out); err != nil {
				return err
			}
			continue
		}
		def, err := flow(v)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		*out = append(*out, Value{Path: p, Default: def, Meaning: meaning})
	}
	return nil
}

// comment joins comment blocks into one line, without the '#'s and the
// generator's markers.
func comment(blocks ...string) string {
	var words []string
	for _, b := range blocks {
		for _, l := range strings.Split(b, "\n") {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
			if l == "" || strings.HasPrefix(l, "BEGIN ") || strings.HasPrefix(l, "END ") {
				continue
			}
			words = append(words, l)
		}
	}
	return strings.Join(words, " ")
}

// flow prints a value in YAML's flow style; a list longer than maxListed
// is counted.
func flow(v *yaml.Node) (string, error) {
	if v.Kind == yaml.SequenceNode && len(v.Content) > maxListed {
		return fmt.Sprintf("a list of %d", len(v.Content)), nil
	}
	c := flowCopy(v)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	if err := enc.Encode(c); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}

// flowCopy is a copy of n, without comments, its mappings and sequences in
// flow style; n is left as it is.
func flowCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	if c.Kind == yaml.MappingNode || c.Kind == yaml.SequenceNode {
		c.Style = yaml.FlowStyle
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, child := range n.Content {
		c.Content[i] = flowCopy(child)
	}
	return &c
}

// Table is the Markdown table of the values: value, default, meaning.
func Table(vals []Value) string {
	var b strings.Builder
	b.WriteString("| value | default | meaning |\n|---|---|---|\n")
	for _, v := range vals {
		def := "-"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Path, def, strings.ReplaceAll(v.Meaning, "|", `\|`))
	}
	return b.String()
}
