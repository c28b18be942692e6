package fleet

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTable: names sorted and unique, kinds and architectures known (that
// every instance type is a label value the API accepts: test/e2e's
// TestFleetTableInTheChart).
func TestTable(t *testing.T) {
	fams := Families()
	require.NotEmpty(t, fams)
	var names []string
	for _, f := range fams {
		names = append(names, f.Name)
		assert.Contains(t, Kinds(), f.Kind, f.Name)
		assert.Contains(t, []Arch{AMD64, ARM64}, f.Arch, f.Name)
		assert.Contains(t, []Source{SourceDescribe, SourcePreview, SourceUserGuide}, f.Src, f.Name)
		require.NotEmpty(t, f.Sizes, f.Name)
		assert.Len(t, slices.Compact(slices.Clone(f.Sizes)), len(f.Sizes), "%s: a size twice", f.Name)
	}
	assert.True(t, slices.IsSorted(names), "families sorted by name")
	assert.Len(t, slices.Compact(slices.Clone(names)), len(names), "a family twice")
	all := InstanceTypes()
	assert.True(t, slices.IsSorted(all))
	assert.Len(t, slices.Compact(slices.Clone(all)), len(all))
}

// graviton matches the families whose letters after the generation hold a
// "g" (c7gn, hpc7g, im4gn, x8g), and Grace's p6e-gb200 and p6e-gb300.
var graviton = regexp.MustCompile(`^[a-z]+[0-9]+[a-z]*g[a-z]*$|^p[0-9]+e?-gb[0-9]+$`)

// TestArch checks the hand-written architecture against EC2's naming, so a
// typo in the table shows: Graviton and Grace families are arm64, the rest
// amd64 (GPU families starting with "g" included).
func TestArch(t *testing.T) {
	var arm []string
	for _, f := range Families() {
		if f.Arch == ARM64 {
			arm = append(arm, f.Name)
		}
		want := AMD64
		if graviton.MatchString(strings.SplitN(f.Name, "-", 2)[0]) || graviton.MatchString(f.Name) {
			want = ARM64
		}
		assert.Equal(t, want, f.Arch, f.Name)
	}
	for _, n := range []string{"hpc7g", "c7gn", "p6e-gb200", "im4gn"} {
		assert.Contains(t, arm, n)
	}
	for _, n := range []string{"g5", "g6e", "gr6", "hpc7a", "p5", "trn2"} {
		assert.NotContains(t, arm, n)
	}
}

// TestCoversBefore: every instance type the chart selected before the table
// (its 22 hand-written types) and every fixture's instance type has EFA here,
// but the trn3 families, which AWS's list lacks (docs/plugin.md says so).
func TestCoversBefore(t *testing.T) {
	before := []string{"p4d.24xlarge", "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge",
		"p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "trn1.32xlarge", "trn1n.32xlarge",
		"trn2.48xlarge", "trn2u.48xlarge", "g5.8xlarge", "g5.12xlarge", "g5.16xlarge", "g5.24xlarge",
		"g5.48xlarge", "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge", "g6e.24xlarge", "g6e.48xlarge"}
	entries, err := os.ReadDir("../../testdata/sysfs")
	require.NoError(t, err)
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".sysfs"); ok && name != "m5.xlarge" && !strings.HasPrefix(name, "trn3") {
			before = append(before, name)
		}
	}
	all := InstanceTypes()
	for _, it := range before {
		assert.Contains(t, all, it)
	}
	assert.NotContains(t, all, "m5.xlarge", "the fixture without EFA")
}

func TestLookup(t *testing.T) {
	for _, c := range []struct {
		in         string
		family     string
		kind       Kind
		arch       Arch
		sizeHasEFA bool
	}{
		{"p5.48xlarge", "p5", GPU, AMD64, true},
		{"p5.4xlarge", "p5", GPU, AMD64, true},
		{"p6e-gb200.36xlarge", "p6e-gb200", GPU, ARM64, true},
		{"hpc7g.16xlarge", "hpc7g", HPC, ARM64, true},
		{"trn2u.48xlarge", "trn2u", Neuron, AMD64, true},
		{"c5n.metal", "c5n", General, AMD64, true},
		{"c5n.large", "c5n", General, AMD64, false}, // a size without EFA
	} {
		f, ok := Lookup(c.in)
		assert.Equal(t, c.sizeHasEFA, ok, c.in)
		assert.Equal(t, c.family, f.Name, c.in)
		assert.Equal(t, c.kind, f.Kind, c.in)
		assert.Equal(t, c.arch, f.Arch, c.in)
	}
	for _, in := range []string{"m5.xlarge", "p5", "", ".48xlarge", "ml.p5.48xlarge"} {
		f, ok := Lookup(in)
		assert.False(t, ok, in)
		assert.Empty(t, f.Name, in)
	}
}

// TestDocsBlock: every family is in the docs' list, under its kind and
// architecture, and no line passes 100 columns.
func TestDocsBlock(t *testing.T) {
	doc := DocsBlock()
	for _, l := range strings.Split(strings.TrimSuffix(doc, "\n"), "\n") {
		assert.LessOrEqual(t, len(l), 100, l)
	}
	items := strings.Split(doc, "- **")
	for _, f := range Families() {
		head := string(f.Kind) + ", " + string(f.Arch) + "**:"
		found := false
		for _, it := range items {
			if strings.HasPrefix(it, head) && strings.Contains(it, " "+f.Name+" ("+strings.Join(f.Sizes, ", ")+")") {
				found = true
			}
		}
		assert.True(t, found, "%s under %q", f.Name, head)
	}
}

func TestSplice(t *testing.T) {
	b, e := "# "+BeginMarker+"\n", "# "+EndMarker+"\n"
	got, err := Splice([]byte("a\n"+b+"old\nlines\n"+e+"z\n"), "new\n")
	require.NoError(t, err)
	assert.Equal(t, "a\n"+b+"new\n"+e+"z\n", string(got))
	got, err = Splice([]byte(b+e), "x\n")
	require.NoError(t, err)
	assert.Equal(t, b+"x\n"+e, string(got), "an empty block fills")
	for name, in := range map[string]string{
		"no markers":     "a\nb\n",
		"no end":         "a\n" + b + "x\n",
		"end only":       e + "x\n",
		"end then begin": e + b,
		"begin twice":    b + b + e,
		"end twice":      b + e + e,
	} {
		_, err := Splice([]byte(in), "x\n")
		assert.Error(t, err, name)
	}
}
