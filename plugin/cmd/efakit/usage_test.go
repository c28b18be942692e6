package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// overview returns the command lines of the top-level usage: the lines
// between "commands:" and the blank line after them.
func overview(t *testing.T, usage string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(usage, "commands:\n")
	require.True(t, ok, usage)
	block, _, _ := strings.Cut(rest, "\n\n")
	return strings.Split(block, "\n")
}

// TestUsageListsEveryCommand: the overview names every command run
// dispatches, and nothing else, with every description starting in one
// column; the package doc lists every command too.
func TestUsageListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("--help")
	require.Equal(t, 0, code)
	require.Empty(t, errOut)
	col := map[int][]string{} // description column -> lines
	var listed []string
	for _, l := range overview(t, out) {
		require.True(t, strings.HasPrefix(l, "  "), l)
		name := strings.Fields(l)[0]
		if strings.HasPrefix(name, "-") {
			continue // a command's flags, on the line below it
		}
		listed = append(listed, name)
		rest := strings.TrimPrefix(l, "  "+name)
		c := len(l) - len(strings.TrimLeft(rest, " "))
		col[c] = append(col[c], l)
	}
	var registered []string
	for _, c := range commands() {
		registered = append(registered, c.name)
	}
	assert.Equal(t, registered, listed, out)
	assert.Len(t, col, 1, "descriptions start in one column:\n%s", out)

	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc, _, _ := strings.Cut(string(src), "package main")
	for _, name := range registered {
		assert.Contains(t, doc, "//\tefakit "+name, "main.go's package doc lists %s", name)
	}
}

// TestHelp: --help and -h of the top level and of every command exit 0 with
// the usage on stdout and nothing on stderr; so does `efakit help
// COMMAND`.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runCLI(args...)
		assert.Equal(t, 0, code, args)
		assert.Empty(t, errOut, args)
		assert.True(t, strings.HasPrefix(out, "usage: efakit <command>"), "%v:\n%s", args, out)
	}
	for _, c := range commands() {
		if c.name == "help" {
			continue
		}
		var help string
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			code, out, errOut := runCLI(args...)
			assert.Equal(t, 0, code, args)
			assert.Empty(t, errOut, args)
			assert.True(t, strings.HasPrefix(out, "usage: efakit "+c.name+" [flags]\n"), "%v:\n%s", args, out)
			if help == "" {
				help = out
			}
			assert.Equal(t, help, out, args)
		}
	}
	code, out, errOut := runCLI("list", "--help")
	require.Equal(t, 0, code, errOut)
	for _, f := range []string{"-sysfs", "-o"} {
		assert.Contains(t, out, "\n  "+f+" ", "list --help shows %s", f)
	}
}

// TestUsageErrors: an argument beyond the flags, an unknown flag or an
// unknown command is a usage error: exit 2, the error and the usage on
// stderr, nothing on stdout, before anything is read.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if c.name == "help" {
			continue
		}
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{c.name, "extra"}, `unexpected argument "extra"`},
			{[]string{c.name, "--", "extra", "more"}, `unexpected argument "extra"`},
			{[]string{c.name, "--frobnicate"}, "flag provided but not defined: -frobnicate"},
		} {
			code, out, errOut := runCLI(tc.args...)
			assert.Equal(t, 2, code, tc.args)
			assert.Empty(t, out, tc.args)
			assert.Contains(t, errOut, tc.msg, tc.args)
			assert.Contains(t, errOut, "usage: efakit "+c.name+" [flags]\n", tc.args)
		}
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"help", "frobnicate"}, {"help", "list", "topo"}} {
		code, out, errOut := runCLI(args...)
		assert.Equal(t, 2, code, args)
		assert.Empty(t, out, args)
		assert.Contains(t, errOut, "usage: efakit <command>", args)
	}
}

// TestNodeNameChecked: slices refuses a node name the API would refuse for
// a Node (a DNS-1123 subdomain), from --node or NODE_NAME, and prints no
// slice; doctor refuses it too. Names the API takes pass.
func TestNodeNameChecked(t *testing.T) {
	// Not parallel: NODE_NAME is set for one case.
	p5 := "../../../testdata/sysfs/p5.48xlarge.sysfs"
	for _, name := range []string{"Bad_Node!", "UPPER", "node-", "a..b", strings.Repeat("a", 254)} {
		code, out, errOut := runCLI("slices", "--sysfs", p5, "--node", name)
		assert.Equal(t, 2, code, name)
		assert.Empty(t, out, name)
		assert.Contains(t, errOut, `efakit slices: --node "`+name+`" is not a valid node name: `, name)
		code, out, errOut = runCLI("doctor", "--sysfs", p5, "--kubeconfig", "", "--node", name)
		assert.Equal(t, 2, code, name)
		assert.Empty(t, out, name)
		assert.Contains(t, errOut, `efakit doctor: --node "`+name+`" is not a valid node name: `, name)
	}
	for _, name := range []string{"n1", "ip-10-0-12-34.us-west-2.compute.internal", strings.Repeat("a", 253)} {
		code, out, errOut := runCLI("slices", "--sysfs", p5, "--node", name, "-o", "json")
		assert.Equal(t, 0, code, errOut)
		assert.Contains(t, out, `"nodeName": "`+name+`"`)
	}
	t.Setenv("NODE_NAME", "Bad_Node!")
	code, out, errOut := runCLI("slices", "--sysfs", p5)
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, `--node "Bad_Node!" is not a valid node name`)
}

// yamlDocs splits a YAML stream into its documents, each with its
// leading comment lines apart.
func yamlDocs(stream string) (comments, bodies []string) {
	for _, d := range strings.Split(stream, "\n---\n") {
		var c, b []string
		for _, l := range strings.Split(strings.TrimSpace(d), "\n") {
			if strings.HasPrefix(l, "#") && len(b) == 0 {
				c = append(c, l)
			} else {
				b = append(b, l)
			}
		}
		comments = append(comments, strings.Join(c, "\n"))
		bodies = append(bodies, strings.Join(b, "\n"))
	}
	return comments, bodies
}

// TestClaimsSafeToApply: on every fixture and group mode, `efakit claims`
// prints ResourceClaimTemplates only (what `kubectl apply -f` creates then
// holds no device); --example-pods adds the same templates and one pod,
// after comment lines that mark it as an example.
func TestClaimsSafeToApply(t *testing.T) {
	t.Parallel()
	paths := fixtures(t)
	pods := 0
	for _, p := range paths {
		for _, mode := range []string{"none", "exclusive", "mixed"} {
			code, out, errOut := runCLI("claims", "--sysfs", p, "--groups", mode)
			require.Equal(t, 0, code, errOut)
			_, bodies := yamlDocs(out)
			for _, b := range bodies {
				if b == "" {
					continue // m5: a comment and no document
				}
				var tm resourceapi.ResourceClaimTemplate
				require.NoError(t, yaml.UnmarshalStrict([]byte(b), &tm), "%s %s:\n%s", p, mode, b)
				assert.Equal(t, "ResourceClaimTemplate", tm.Kind, "%s %s:\n%s", p, mode, b)
			}

			code, withPods, errOut := runCLI("claims", "--sysfs", p, "--groups", mode, "--example-pods")
			require.Equal(t, 0, code, errOut)
			require.True(t, strings.HasPrefix(withPods, out), "%s %s: the same templates first", p, mode)
			if withPods == out {
				continue // no whole-node pod fits (trn1 in exclusive mode, m5)
			}
			pods++
			tail, ok := strings.CutPrefix(strings.TrimPrefix(withPods, out), "---\n")
			require.True(t, ok, withPods)
			comments, bodies := yamlDocs(tail)
			require.Len(t, bodies, 1, "%s %s: one more document, the pod", p, mode)
			var pod corev1.Pod
			require.NoError(t, yaml.UnmarshalStrict([]byte(bodies[0]), &pod), bodies[0])
			assert.Equal(t, "Pod", pod.Kind, p)
			assert.True(t, strings.HasPrefix(comments[0], "# EXAMPLE POD (--example-pods): do not apply as printed."), "%s %s:\n%s", p, mode, comments[0])
		}
	}
	assert.Greater(t, pods, 0, "some fixture has an example pod")
}

func fixtures(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("../../../testdata/sysfs")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sysfs") {
			out = append(out, "../../../testdata/sysfs/"+e.Name())
		}
	}
	require.NotEmpty(t, out)
	return out
}
