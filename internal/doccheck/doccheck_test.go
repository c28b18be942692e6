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
