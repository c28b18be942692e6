package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/efakit/efakit/internal/doccheck"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A docCommand is one "$ " line of a ```console block of the docs, with
// the lines of output written under it.
type docCommand struct {
	where   string // page:line
	command string
	want    []string // "..." stands for any lines
}

// docCommands reads the ```console blocks of a Markdown page. A command
// continues on the next line after a trailing backslash.
func docCommands(t *testing.T, page string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	var out []docCommand
	for _, blk := range doccheck.Blocks(b) {
		if blk.Lang != "console" {
			continue
		}
		var last *docCommand
		for i, l := range blk.Lines {
			switch {
			case strings.HasPrefix(l, "$ "):
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", page, blk.Line+1+i), command: strings.TrimPrefix(l, "$ ")})
				last = &out[len(out)-1]
			case last == nil:
				t.Fatalf("%s:%d: a ```console block starts with output, not a $ command", page, blk.Line+1+i)
			case strings.HasSuffix(last.command, "\\") && len(last.want) == 0:
				last.command += "\n" + l // bash reads the backslash and newline as one space
			default:
				last.want = append(last.want, l)
			}
		}
	}
	return out
}

// matches tells whether got's lines are want's, "..." standing for any
// number of lines.
func matches(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matches(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && strings.TrimRight(got[0], " ") == strings.TrimRight(want[0], " ") && matches(want[1:], got[1:])
}

// TestDocCommands runs every ```console block of the README and docs/ as a
// reader would, from the repository's root: efakit is the CLI built from
// this tree, helm the one of this module's go.mod. Each command must exit
// 0 and print the lines written under it ("..." for any lines; no lines
// written: its output is not checked). Blocks that need a cluster or AWS
// are ```sh, and are not run.
func TestDocCommands(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "efakit"), "./cmd/efakit")
	build.Dir = filepath.Join(root, "plugin")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	helm := "#!/bin/sh\nexec go tool -modfile=" + filepath.Join(root, "test/e2e/go.mod") + " helm \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "helm"), []byte(helm), 0o755))
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	ran := 0
	for _, page := range pages {
		for _, c := range docCommands(t, page) {
			ran++
			rel, _ := filepath.Rel(root, c.where)
			t.Run(rel, func(t *testing.T) {
				cmd := exec.Command("bash", "-c", c.command)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				require.NoError(t, cmd.Run(), "%s\n%s%s", c.command, stdout.String(), stderr.String())
				if len(c.want) == 0 {
					return
				}
				got := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
				assert.True(t, matches(c.want, got), "%s\nwant:\n%s\ngot:\n%s", c.command, strings.Join(c.want, "\n"), stdout.String())
			})
		}
	}
	require.NotZero(t, ran, "no ```console block in the docs")
}

func TestDocCommandMatch(t *testing.T) {
	for _, tc := range []struct {
		want, got []string
		ok        bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, true},
		{[]string{"a", "...", "d"}, []string{"a", "b", "c", "d"}, true},
		{[]string{"...", "d"}, []string{"d"}, true},
		{[]string{"a", "..."}, []string{"a"}, true},
		{[]string{"a", "b"}, []string{"a", "c"}, false},
		{[]string{"a"}, []string{"a", "b"}, false},
	} {
		assert.Equal(t, tc.ok, matches(tc.want, tc.got), "%v %v", tc.want, tc.got)
	}
}
