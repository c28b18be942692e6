package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite api/*.txt from the code")

// file is a package's API file: api/efa_health.txt for efa/health.
func file(pkg string) string {
	return filepath.Join("..", "..", "api", strings.ReplaceAll(pkg, "/", "_")+".txt")
}

// TestAPI: every library package's exported API is what api/<package>.txt
// records, line for line; a change of the API shows as a diff of those
// files (go test ./internal/apicheck -update).
func TestAPI(t *testing.T) {
	root := os.DirFS(filepath.Join("..", ".."))
	total, names := 0, 0
	for _, pkg := range Packages {
		lines, err := API(root, pkg)
		require.NoError(t, err, pkg)
		require.NotEmpty(t, lines, pkg)
		total += len(lines)
		names += len(Names(lines))
		got := strings.Join(lines, "\n") + "\n"
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(file(pkg)), 0o755))
			require.NoError(t, os.WriteFile(file(pkg), []byte(got), 0o644))
		}
		want, err := os.ReadFile(file(pkg))
		require.NoError(t, err, "run go test ./internal/apicheck -update")
		if string(want) != got {
			t.Errorf("%s: the exported API changed; if on purpose, run go test ./internal/apicheck -update and say so in CHANGELOG.md:\n%s",
				pkg, lineDiff(strings.Split(string(want), "\n"), lines))
		}
	}
	t.Logf("%d exported names in %d packages (%d with struct fields and interface methods)", names, len(Packages), total)
	if names > budget {
		t.Errorf("the library exports %d names, more than its budget of %d: make a helper internal, or raise the budget on purpose", names, budget)
	}
}

// budget is the most names the library's packages may export together,
// struct fields and interface methods aside (issue 43: 335 before).
const budget = 200

// TestEveryPublicPackage: Packages names every package of the library
// outside internal/ and testdata, so that a new one is recorded too.
func TestEveryPublicPackage(t *testing.T) {
	have := map[string]bool{}
	root := filepath.Join("..", "..")
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "internal" || d.Name() == "testdata" || d.Name() == "bin":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			have[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	}))
	var got []string
	for p := range have {
		got = append(got, p)
	}
	assert.ElementsMatch(t, Packages, got)
}

// lineDiff lists the lines only in want ("- ") and only in got ("+ ").
func lineDiff(want, got []string) string {
	in := func(l []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range l {
			if x != "" {
				m[x] = true
			}
		}
		return m
	}
	w, g := in(want), in(got)
	var out []string
	for _, x := range want {
		if x != "" && !g[x] {
			out = append(out, "- "+x)
		}
	}
	for _, x := range got {
		if !w[x] {
			out = append(out, "+ "+x)
		}
	}
	return strings.Join(out, "\n")
}
