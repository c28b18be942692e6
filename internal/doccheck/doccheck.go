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

// Reports are the pages that report measurements: each figure beside the
// command that made it, on the machine it ran on. The other pages are
// reference and tasks, and speak of the software only.
var Reports = map[string]bool{"docs/performance.md": true, "docs/fleet.md": true}

var (
	// issueRef is a numbered issue; upstreamIssue one of another project,
	// named just before it ("kubernetes/kubernetes issue 139836",
	// "dranet's issue 293").
	issueRef      = regexp.MustCompile(`(?i)\bissues? #?\d+`)
	upstreamIssue = regexp.MustCompile(`(?i)(\b[\w.-]+/[\w.-]+|'s) issues? #?\d+`)
	// machineWords speak of where a figure came from.
	machineWords = regexp.MustCompile(`(?i)\bthis (machine|vm|host|2-v?cpu machine)\b|\b\d+-v?CPU (machine|VM|host)\b`)
	// articleWords speak of the article the project started from.
	articleWords = regexp.MustCompile(`(?i)\bseed article\b|\bthe article\b`)
)

// Wording returns one line for each place, outside code blocks, where a
// page speaks of the project's history rather than its software: an
// issue number that is not another project's (any page), the machine a
// figure came from or the article the project started from (pages that
// are not Reports).
func Wording(fsys fs.FS, files []string) ([]string, error) {
	var bad []string
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		for _, line := range Lines(b) {
			if line.Fence || line.Fenced {
				continue
			}
			l, where := line.Text, fmt.Sprintf("%s:%d", f, line.N)
			upstream := map[int]bool{}
			for _, m := range upstreamIssue.FindAllStringIndex(l, -1) {
				upstream[m[1]] = true
			}
			for _, m := range issueRef.FindAllStringIndex(l, -1) {
				if !upstream[m[1]] {
					bad = append(bad, fmt.Sprintf("%s: %q names one of the project's issues: say what the software does", where, l[m[0]:m[1]]))
				}
			}
			if Reports[f] {
				continue
			}
			for _, re := range []*regexp.Regexp{machineWords, articleWords} {
				for _, m := range re.FindAllString(l, -1) {
					bad = append(bad, fmt.Sprintf("%s: %q: a reference page speaks of the software, not of a machine or the article", where, m))
				}
			}
		}
	}
	return bad, nil
}

// Prose is how a Markdown page reads: the words and sentences of its
// prose, and how many of its lines are code.
type Prose struct {
	Words, Sentences int
	// CodeLines are the lines of fenced (fences included) and indented
	// blocks; Lines are the page's lines that are not blank.
	CodeLines, Lines int
}

// WordsPerSentence is the mean length of the page's sentences.
func (p Prose) WordsPerSentence() float64 {
	if p.Sentences == 0 {
		return 0
	}
	return float64(p.Words) / float64(p.Sentences)
}

// CodeShare is the share of the page's lines that are code, 0 to 1.
func (p Prose) CodeShare() float64 {
	if p.Lines == 0 {
		return 0
	}
	return float64(p.CodeLines) / float64(p.Lines)
}

// Add sums two pages.
func (p Prose) Add(q Prose) Prose {
	return Prose{p.Words + q.Words, p.Sentences + q.Sentences, p.CodeLines + q.CodeLines, p.Lines + q.Lines}
}

var (
	listItem    = regexp.MustCompile(`^([-*+]|\d+\.)\s+`)
	inlineCode  = regexp.MustCompile("`[^`]*`")
	linkTarget  = regexp.MustCompile(`\]\([^)]*\)`)
	sentenceEnd = regexp.MustCompile(`[.!?]\s+`)
)

// ReadProse measures a page. Prose is what is left without fenced blocks,
// headings and tables; a paragraph and a list item each end a sentence,
// and so does '.', '!' or '?' before a space. Inline code counts as one
// word and a link as its text. A generated block (from a "<!-- BEGIN"
// line to a "<!-- END" line) is data, not prose, and is left out. An
// indented block (four spaces or a tab, after a blank line, not a list
// item) is code.
func ReadProse(b []byte) Prose {
	var p Prose
	var unit []string
	flush := func() {
		if len(unit) == 0 {
			return
		}
		t := linkTarget.ReplaceAllString(inlineCode.ReplaceAllString(strings.Join(unit, " "), "X"), "]")
		for _, s := range sentenceEnd.Split(t, -1) {
			if n := len(strings.Fields(s)); n > 0 {
				p.Words += n
				p.Sentences++
			}
		}
		unit = unit[:0]
	}
	generated, indented, blank := false, false, true
	for _, line := range Lines(b) {
		l, s := line.Text, strings.TrimSpace(line.Text)
		code := line.Fence || line.Fenced
		indented = !code && !generated && s != "" && (blank || indented) &&
			(strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) && !listItem.MatchString(s)
		blank = s == ""
		switch {
		case !code && strings.HasPrefix(s, "<!-- BEGIN"):
			generated = true
			flush()
		case generated:
			generated = !strings.HasPrefix(s, "<!-- END")
		case line.Fence:
			p.CodeLines++
			p.Lines++
			flush()
		case line.Fenced, indented:
			p.CodeLines++
			p.Lines++
		case s == "":
			flush()
		case strings.HasPrefix(s, "|"), strings.HasPrefix(s, "#"):
			p.Lines++
			flush()
		default:
			p.Lines++
			if listItem.MatchString(s) {
				flush()
				s = listItem.ReplaceAllString(s, "")
			}
			unit = append(unit, s)
		}
	}
	flush()
	return p
}
