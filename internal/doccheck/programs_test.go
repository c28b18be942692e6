package doccheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A program is a ```go block of the docs that is a whole program
// (package main), with the ```text block under it: a "$ go run . ARGS"
// line and the lines the program prints.
type program struct {
	where  string // page:line
	source string
	args   []string
	want   string
}

// programs reads a page's programs. A program with no ```text block
// under it, or one that does not start with "$ go run .", is an error.
func programs(page string, b []byte) ([]program, error) {
	var out []program
	blocks := Blocks(b)
	for i, blk := range blocks {
		text := strings.Join(blk.Lines, "\n") + "\n"
		if blk.Lang != "go" || !strings.HasPrefix(text, "package main") {
			continue
		}
		where := fmt.Sprintf("%s:%d", page, blk.Line)
		if i+1 == len(blocks) || blocks[i+1].Lang == "go" {
			return nil, fmt.Errorf("%s: program has no ```text block of its output", where)
		}
		next := blocks[i+1]
		args, ok := "", false
		if len(next.Lines) > 0 {
			args, ok = strings.CutPrefix(next.Lines[0], "$ go run .")
		}
		if next.Lang != "text" || !ok {
			return nil, fmt.Errorf("%s: the block under the program is not ```text starting with \"$ go run .\"", where)
		}
		p := program{where: where, source: text, args: strings.Fields(args)}
		for _, l := range next.Lines[1:] {
			p.want += l + "\n"
		}
		out = append(out, p)
	}
	return out, nil
}

// TestGoPrograms builds each whole program of the docs against this
// tree, runs it from the repository's root with the arguments its
// output block names, and compares what it prints.
func TestGoPrograms(t *testing.T) {
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	var all []program
	for _, f := range markdown(t, os.DirFS(repo)) {
		b, err := os.ReadFile(filepath.Join(repo, f))
		require.NoError(t, err)
		p, err := programs(f, b)
		require.NoError(t, err)
		all = append(all, p...)
	}
	require.NotEmpty(t, all, "docs/library.md has programs")
	// The package must be inside the module to import it; a directory
	// starting with "." is left out of ./... patterns.
	dir, err := os.MkdirTemp(repo, ".docprograms-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, p := range all {
		t.Run(p.where, func(t *testing.T) {
			pkg := filepath.Join(dir, fmt.Sprint(i))
			require.NoError(t, os.Mkdir(pkg, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(p.source), 0o644))
			bin := filepath.Join(pkg, "prog")
			build := exec.Command("go", "build", "-o", bin, ".")
			build.Dir = pkg
			out, err := build.CombinedOutput()
			require.NoError(t, err, "%s does not build:\n%s", p.where, out)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, bin, p.args...)
			run.Dir = repo
			var stderr bytes.Buffer
			run.Stderr = &stderr
			got, err := run.Output()
			require.NoError(t, err, "%s: %s", p.where, stderr.String())
			assert.Equal(t, p.want, string(got), "%s prints, on %v", p.where, p.args)
		})
	}
}

func TestProgramsNeedOutput(t *testing.T) {
	_, err := programs("a.md", []byte("```go\npackage main\n\nfunc main() {}\n```\n\nno output\n"))
	assert.ErrorContains(t, err, "a.md:1: program has no ```text block")
	_, err = programs("a.md", []byte("```go\npackage main\n```\n\n```text\nhello\n```\n"))
	assert.ErrorContains(t, err, "not ```text starting with")
	p, err := programs("a.md", []byte("```go\npackage main\n```\n\n```text\n$ go run . x y\nhello\n```\n```go\nfmt.Println()\n```\n"))
	require.NoError(t, err)
	assert.Equal(t, []program{{where: "a.md:1", source: "package main\n", args: []string{"x", "y"}, want: "hello\n"}}, p)
}

// exampleRef is a "`ExampleName` in [`pkg`](../pkg/file_test.go)" of the
// docs: an example named with the file it is in.
var exampleRef = regexp.MustCompile("`(Example\\w*)` in \\[`[^`]+`\\]\\(\\.\\./([^)#]+_test\\.go)\\)")

// TestExamplesNamed: every example docs/library.md names is in the file
// it links, as a function go test runs (it has an // Output: comment), and
// named after an identifier of its package (go vet's tests check), so that
// go doc and pkgsite show it under that identifier.
func TestExamplesNamed(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/library.md")
	require.NoError(t, err)
	refs := exampleRef.FindAllStringSubmatch(string(b), -1)
	require.GreaterOrEqual(t, len(refs), 6, "the common tasks' table names its examples")
	for _, m := range refs {
		src, err := os.ReadFile(filepath.Join("../..", m[2]))
		if !assert.NoError(t, err, m[0]) {
			continue
		}
		i := bytes.Index(src, []byte("\nfunc "+m[1]+"() {\n"))
		if !assert.GreaterOrEqual(t, i, 0, "%s is not in %s", m[1], m[2]) {
			continue
		}
		body := src[i:]
		if j := bytes.Index(body[1:], []byte("\n}\n")); j >= 0 {
			body = body[:j+1]
		}
		assert.Contains(t, string(body), "// Output:", "%s in %s: without an Output comment go test only compiles it", m[1], m[2])
	}
}
