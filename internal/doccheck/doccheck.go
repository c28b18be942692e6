// Package doccheck checks the repository's Markdown. Check finds broken
// references: relative links to files that are not there or to headings a
// page lacks, and make targets the Makefile does not have. Wording finds a
// reference page speaking of the project's history. ReadProse measures
// how a page reads. Its tests run them over the repository, and build and
// run the docs' whole Go programs.
package doccheck

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"unicode"
)

var (
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	makeTarget = regexp.MustCompile("`make ([a-z][a-z0-9-]*)")
	rule       = regexp.MustCompile(`^([a-z][a-z0-9-]*)\s*:`)
)

// Slug is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, every other character but letters, digits, '-' and '_' dropped.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// A Line is one line of a Markdown page.
type Line struct {
	N    int // from 1
	Text string
	// Fence is a line that opens or closes a fenced block (it starts
	// with three backquotes); Fenced a line inside one. Lang is the
	// block's info string ("go", "console", "" for none) on both.
	Fence, Fenced bool
	Lang          string
}

// Lines splits a page into its lines, each marked inside or outside a
// fenced block. Every check of this package reads pages through it.
func Lines(b []byte) []Line {
	var out []Line
	fenced, lang := false, ""
	for i, l := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(l)
		if strings.HasPrefix(s, "```") {
			if !fenced {
				lang = strings.TrimPrefix(s, "```")
			}
			out = append(out, Line{N: i + 1, Text: l, Fence: true, Lang: lang})
			fenced = !fenced
			continue
		}
		if !fenced {
			lang = ""
		}
		out = append(out, Line{N: i + 1, Text: l, Fenced: fenced, Lang: lang})
	}
	return out
}

// A Block is a fenced block of a page.
type Block struct {
	Lang  string   // its info string
	Line  int      // the line of its opening fence
	Lines []string // between the fences
}

// Blocks returns a page's fenced blocks in order; one left open runs to
// the end of the page.
func Blocks(b []byte) []Block {
	var out []Block
	open := false
	for _, l := range Lines(b) {
		switch {
		case l.Fence && !open:
			out = append(out, Block{Lang: l.Lang, Line: l.N})
			open = true
		case l.Fence:
			open = false
		case l.Fenced:
			out[len(out)-1].Lines = append(out[len(out)-1].Lines, l.Text)
		}
	}
	return out
}

// page is one Markdown file's anchors and references, outside code blocks.
type page struct {
	anchors map[string]bool
	links   []string // relative link targets, fragments kept
	targets []string // make targets named
}

func parse(b []byte) page {
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	for _, line := range Lines(b) {
		if line.Fence || line.Fenced {
			continue
		}
		l := line.Text
		if h, ok := strings.CutPrefix(l, "#"); ok {
			h = strings.TrimLeft(h, "#")
			if strings.HasPrefix(h, " ") {
				s := Slug(h)
				if n := seen[s]; n > 0 {
					p.anchors[fmt.Sprintf("%s-%d", s, n)] = true
				} else {
					p.anchors[s] = true
				}
				seen[s]++
			}
		}
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			t := m[1]
			if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			p.links = append(p.links, t)
		}
		for _, m := range makeTarget.FindAllStringSubmatch(l, -1) {
			p.targets = append(p.targets, m[1])
		}
	}
	return p
}

// Targets are the rules a Makefile defines.
func Targets(makefile []byte) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(string(makefile), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// Check reads the Markdown files named (paths in fsys) and returns one
// line for each link to a missing file or heading and each make target the
// Makefile lacks.
func Check(fsys fs.FS, files []string, targets map[string]bool) ([]string, error) {
	pages := map[string]page{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		pages[f] = parse(b)
	}
	var bad []string
	for _, f := range files {
		p := pages[f]
		for _, l := range p.links {
			file, frag, _ := strings.Cut(l, "#")
			target := f
			if file != "" {
				target = path.Join(path.Dir(f), file)
				if _, err := fs.Stat(fsys, strings.TrimSuffix(target, "/")); err != nil {
					bad = append(bad, fmt.Sprintf("%s: link %s: no %s", f, l, target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			tp, ok := pages[target]
			if !ok {
				b, err := fs.ReadFile(fsys, target)
				if err != nil {
					return nil, err
				}
				tp = parse(b)
			}
			if !tp.anchors[frag] {
				bad = append(bad, fmt.Sprintf("%s: link %s: %s has no heading #%s", f, l, target, frag))
			}
		}
		for _, t := range p.targets {
			if !targets[t] {
				bad = append(bad, fmt.Sprintf("%s: make %s: no such target in the Makefile", f, t))
			}
		}
	}
	return bad, nil
}
