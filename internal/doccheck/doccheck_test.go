package doccheck

import (
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markdown is every Markdown file of the repository but the build's and
// the tools' own directories.
func markdown(t *testing.T, root fs.FS) []string {
	t.Helper()
	var out []string
	require.NoError(t, fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (p == ".git" || p == "bin") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	}))
	return out
}

// TestRepositoryLinks: every relative link of the repository's Markdown
// leads to a file that is there (and to a heading the page has), and every
// make target it names is the Makefile's.
func TestRepositoryLinks(t *testing.T) {
	root := os.DirFS("../..")
	mk, err := fs.ReadFile(root, "Makefile")
	require.NoError(t, err)
	files := markdown(t, root)
	require.Contains(t, files, "README.md")
	require.Contains(t, files, "docs/design.md")
	bad, err := Check(root, files, Targets(mk))
	require.NoError(t, err)
	assert.Empty(t, bad)
}

// TestCheckFinds: the checker reports each kind of broken reference, and
// only those.
func TestCheckFinds(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# Top\n\n## The DRA plugin: \"All EFAs\"\n\n" +
			"[ok](docs/a.md) [ok](docs/a.md#a-heading) [ok](#the-dra-plugin-all-efas) [dir](docs/)\n" +
			"[gone](docs/b.md) [no heading](docs/a.md#nothing) [web](https://example.com/x.md)\n" +
			"`make test` and `make gone`\n```\n[in code](nowhere.md) `make nothing`\n```\n")},
		"docs/a.md": {Data: []byte("# A heading\n\n[up](../README.md#top) [dup](#a-heading)\n")},
	}
	bad, err := Check(fsys, []string{"README.md", "docs/a.md"}, Targets([]byte("test: lint\n\tgo test\nlint:\n")))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"README.md: link docs/b.md: no docs/b.md",
		"README.md: link docs/a.md#nothing: docs/a.md has no heading #nothing",
		"README.md: make gone: no such target in the Makefile",
	}, bad)
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"3. libfabric versions":                         "3-libfabric-versions",
		`"All EFAs of my GPU": exact counts and groups`: "all-efas-of-my-gpu-exact-counts-and-groups",
		"What the `efakit` command costs":               "what-the-efakit-command-costs",
		"Pod start through a real node":                 "pod-start-through-a-real-node",
	} {
		assert.Equal(t, want, Slug(in), in)
	}
}

// TestRepositoryWording: no page names one of the project's issues, and
// no page but the reports speaks of a machine or the article the project
// started from.
func TestRepositoryWording(t *testing.T) {
	root := os.DirFS("../..")
	bad, err := Wording(root, markdown(t, root))
	require.NoError(t, err)
	assert.Empty(t, bad)
}

// TestWordingFinds: each kind of wording is found where the rule says,
// and another project's issue, a report's machine and code blocks pass.
func TestWordingFinds(t *testing.T) {
	fsys := fstest.MapFS{
		"docs/a.md": {Data: []byte("Until issue 23 it did not. See kubernetes/kubernetes issue 139836 and dranet's issue 293.\n" +
			"Measured on this machine. As the seed article promised.\n```\nissue 7 on this machine\n```\n")},
		"docs/performance.md": {Data: []byte("On this 2-CPU machine it took 3 s (issues 12).\n")},
	}
	bad, err := Wording(fsys, []string{"docs/a.md", "docs/performance.md"})
	require.NoError(t, err)
	assert.Equal(t, []string{
		`docs/a.md:1: "issue 23" names one of the project's issues: say what the software does`,
		`docs/a.md:2: "this machine": a reference page speaks of the software, not of a machine or the article`,
		`docs/a.md:2: "seed article": a reference page speaks of the software, not of a machine or the article`,
		`docs/performance.md:1: "issues 12" names one of the project's issues: say what the software does`,
	}, bad)
}

func TestReadProse(t *testing.T) {
	p := ReadProse([]byte("# A heading of five words\n\nOne two three. Four five\nsix `seven eight`!\n\n" +
		"- a list item\n- another [link](x.md#y) here\n\n| a | table |\n|---|---|\n\n```sh\n$ make test\n```\n" +
		"\n    indented code\n    more\n\n- item\n\n    - nested item\n" +
		"<!-- BEGIN x -->\n- a b c d e f\n<!-- END x -->\n"))
	assert.Equal(t, Prose{Words: 16, Sentences: 6, CodeLines: 5, Lines: 14}, p)
	assert.InDelta(t, 16.0/6, p.WordsPerSentence(), 1e-9)
	assert.InDelta(t, 5.0/14, p.CodeShare(), 1e-9)
}

// MaxWordsPerSentence is the longest mean sentence a page may have.
const MaxWordsPerSentence = 24

// TestRepositoryProse prints how each page of the README and docs/ reads
// (go test -v) and fails when a page's sentences average more than
// MaxWordsPerSentence words.
func TestRepositoryProse(t *testing.T) {
	root := os.DirFS("../..")
	var all Prose
	for _, f := range markdown(t, root) {
		if !strings.HasPrefix(f, "docs/") && f != "README.md" {
			continue
		}
		b, err := fs.ReadFile(root, f)
		require.NoError(t, err)
		p := ReadProse(b)
		all = all.Add(p)
		t.Logf("%-28s %5.1f words a sentence, %4d sentences, %3.0f%% code", f, p.WordsPerSentence(), p.Sentences, 100*p.CodeShare())
		assert.LessOrEqual(t, p.WordsPerSentence(), float64(MaxWordsPerSentence), "%s: sentences average %.1f words; split them", f, p.WordsPerSentence())
	}
	t.Logf("%-28s %5.1f words a sentence, %4d sentences, %3.0f%% code", "all", all.WordsPerSentence(), all.Sentences, 100*all.CodeShare())
}

func TestBlocks(t *testing.T) {
	b := []byte("text\n```console\n$ efakit list\n```\n\n  ```go\n  package main\n  ```\nafter\n```\nopen to the end\n")
	assert.Equal(t, []Block{
		{Lang: "console", Line: 2, Lines: []string{"$ efakit list"}},
		{Lang: "go", Line: 6, Lines: []string{"  package main"}},
		{Lang: "", Line: 10, Lines: []string{"open to the end", ""}},
	}, Blocks(b))
	lines := Lines(b)
	assert.Equal(t, Line{N: 3, Text: "$ efakit list", Fenced: true, Lang: "console"}, lines[2])
	assert.Equal(t, Line{N: 9, Text: "after"}, lines[8])
}
