package sysfs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

const (
	p5Fixture = "../testdata/sysfs/p5.48xlarge.sysfs"
	headerV1  = "efakit-sysfs-capture v1"
)

// small is a tree with every kind of entry and link of tree(), without its
// two 64 KiB files: a seed the fuzz engine can run thousands of times a
// second.
func small() []sysfs.Entry {
	var out []sysfs.Entry
	for _, e := range tree() {
		if len(e.Data) < 1024 {
			out = append(out, e)
		}
	}
	return out
}

// capture writes es as a capture.
func capture(t testing.TB, header []string, es []sysfs.Entry) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&buf, header, es))
	return buf.String()
}

// lines splits a capture into its lines, without the newlines.
func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func join(ls []string) string { return strings.Join(ls, "\n") + "\n" }

// asV1 turns a capture into the v1 format: the v1 header, no end marker.
func asV1(t *testing.T, s string) string {
	t.Helper()
	ls := lines(s)
	require.Equal(t, sysfs.CaptureHeader, ls[0])
	require.True(t, strings.HasPrefix(ls[len(ls)-1], "end "), ls[len(ls)-1])
	return join(append([]string{headerV1}, ls[1:len(ls)-1]...))
}

func TestCaptureRoundTrip(t *testing.T) {
	t.Parallel()
	es := tree()
	text := capture(t, []string{"a note", "two\nlines"}, es)
	c, err := sysfs.DecodeCapture(strings.NewReader(text))
	require.NoError(t, err)
	assert.Empty(t, c.Note, "a v2 capture is checked whole")
	m1, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	m2, err := sysfs.NewMemFS(c.Entries)
	require.NoError(t, err)
	assert.True(t, equalEntries(m1.Entries(), m2.Entries()), "round trip changed the tree")
	assert.Contains(t, text, "# a note\n")
	assert.Contains(t, text, "# two\n# lines\n", "a newline in a header line stays in comments")
	assert.Contains(t, text, `f devices/pci0000:44/0000:44:00.0/remove "" 0200`)
	assert.Contains(t, text, `f devices/pci0000:44/0000:44:00.0/core_count "8"`)
	ls := lines(text)
	assert.Equal(t, sysfs.CaptureHeader, ls[0])
	assert.Regexp(t, fmt.Sprintf(`^end %d sha256:[0-9a-f]{64}$`, len(es)), ls[len(ls)-1])
}

func TestParseCaptureErrors(t *testing.T) {
	t.Parallel()
	h := sysfs.CaptureHeader + "\n"
	v1 := headerV1 + "\n"
	end0 := capture(t, nil, nil)[len(h):] // the end marker of no entries
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"nonsense\n", "want header"},
		{"efakit-sysfs-capture v3\n", "want header"},
		{h + "f a\n", "line 2: file a: missing data"},
		{h + "f a \"x\n", "bad quoted field"},
		{h + "x a\n", "unknown entry kind"},
		{h + "f ../a \"\"\n", "invalid path"},
		{h + "f /a \"\"\n", "invalid path"},
		{h + "d a\nd a\n", "line 3: duplicate path"},
		{h + "l a\n", "missing target"},
		{h + "l a \"\"\n", "missing target"},
		{h + "f a \"\" 999\n", "bad mode"},
		{h + "f a \"\" 0000\n", "bad mode"},
		{h + "f a \"\" 0444 x\n", "unexpected fields"},
		{v1 + "l a b 0777\n", "line 2: link a: a link has no mode"},
		{h + "f a\"b \"\"\n", "holds a quote"},
		{h + "f a \"x\"y\n", "no space after"},
		// The end marker.
		{h, "cut short: no end marker after line 1"},
		{h + "d a\n# a comment\n", "cut short: no end marker after line 3"},
		{h + end0 + "d a\n", "line 3: \"d a\" after the end marker of line 2"},
		{h + end0 + end0, "line 3: \"end 0 sha256:"},
		{h + "end\n", "line 2: bad end marker"},
		{h + "end 0\n", "bad end marker"},
		{h + "end 0 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "bad end marker"},
		{h + "end 00 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "bad end marker"},
		{h + "end -0 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "bad end marker"},
		{h + "end 0 sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\n", "bad end marker"},
		{h + "end 0 sha256:e3b0c4\n", "bad end marker"},
		{h + "end 0 sha256:z3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "bad end marker"},
		{h + "end 0 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 x\n", "bad end marker"},
		{h + "d a\nend 2 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "line 3: the end marker counts 2 entries, the capture holds 1"},
		{h + "d a\nend 1 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "line 3: the entry lines do not match the end marker's SHA-256"},
		{v1 + "d a\n" + end0, "line 3: end marker in a v1 capture"},
	} {
		_, err := sysfs.ParseCapture(strings.NewReader(tc.in))
		if assert.Error(t, err, "%q", tc.in) {
			assert.Contains(t, err.Error(), tc.want, "%q", tc.in)
		}
	}
	// An empty capture is a capture.
	c, err := sysfs.DecodeCapture(strings.NewReader(h + end0))
	require.NoError(t, err)
	assert.Empty(t, c.Entries)
	// A file under a file is a tree error, found when the tree is built.
	es, err := sysfs.ParseCapture(strings.NewReader(capture(t, nil, []sysfs.Entry{
		{Path: "a", Kind: sysfs.KindFile}, {Path: "a/b", Kind: sysfs.KindFile},
	})))
	require.NoError(t, err)
	_, err = sysfs.NewMemFS(es)
	assert.ErrorContains(t, err, "memfs: a is not a directory")
}

// TestCaptureEndMarker cuts and edits the p5 fixture: a capture that lost
// lines at its end or in its middle, or had one changed, added or
// reordered, is an error saying so; comments are free to change.
func TestCaptureEndMarker(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(p5Fixture)
	require.NoError(t, err)
	whole := lines(string(b))
	want, err := sysfs.ParseCapture(bytes.NewReader(b))
	require.NoError(t, err, "the fixture itself")

	parse := func(ls []string) error {
		_, err := sysfs.ParseCapture(strings.NewReader(join(ls)))
		return err
	}
	// Cut at line boundaries: the last line, the last few, half of it,
	// all but the header.
	for _, keep := range []int{len(whole) - 1, len(whole) - 2, len(whole) - 40, len(whole) / 2, 1} {
		err := parse(whole[:keep])
		if assert.Error(t, err, "cut to %d lines", keep) {
			assert.Contains(t, err.Error(), fmt.Sprintf("cut short: no end marker after line %d", keep))
		}
	}

	// One EFA's lines gone, the marker kept: the capture counts fewer
	// entries than the marker.
	var dropped []string
	gone := 0
	for _, l := range whole {
		if strings.Contains(l, "0000:4f:00.0") && !strings.HasPrefix(l, "#") {
			gone++
			continue
		}
		dropped = append(dropped, l)
	}
	require.Greater(t, gone, 30, "the EFA 0000:4f:00.0 has lines to lose")
	err = parse(dropped)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), fmt.Sprintf("line %d: the end marker counts %d entries, the capture holds %d: entry lines were removed or added", len(dropped), len(want), len(want)-gone))
	}

	// An entry line changed, added, or two swapped.
	at := -1
	for i, l := range whole {
		if strings.HasPrefix(l, "f ") && strings.HasSuffix(l, "/vendor \"0x1d0f\\n\"") {
			at = i
			break
		}
	}
	require.NotEqual(t, -1, at)
	changed := append([]string(nil), whole...)
	changed[at] = strings.Replace(changed[at], "0x1d0f", "0x1d0e", 1)
	swapped := append([]string(nil), whole...)
	swapped[at], swapped[at+1] = swapped[at+1], swapped[at]
	added := append(append(append([]string(nil), whole[:at]...), "d devices/added"), whole[at:]...)
	for name, ls := range map[string][]string{"changed": changed, "swapped": swapped} {
		err := parse(ls)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), fmt.Sprintf("line %d: the entry lines do not match the end marker's SHA-256: a line was changed", len(whole)), name)
		}
	}
	assert.ErrorContains(t, parse(added), fmt.Sprintf("the capture holds %d: entry lines were removed or added", len(want)+1))

	// Comments added, removed and changed, blank lines and trailing
	// blanks: the same entries, no error.
	var notes []string
	for i, l := range whole {
		switch {
		case strings.HasPrefix(l, "#"):
			notes = append(notes, "# "+strings.ToUpper(l)) // changed
		case i == at:
			notes = append(notes, "", "# added", "  "+l+" \t")
		default:
			notes = append(notes, l)
		}
	}
	notes = append(notes, "# after the end", "")
	got, err := sysfs.ParseCapture(strings.NewReader(join(notes)))
	require.NoError(t, err)
	assert.True(t, equalEntries(want, got))
}

// TestCaptureV1 reads the format before the end marker: the same tree,
// with a note a caller can show, through every way in.
func TestCaptureV1(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(p5Fixture)
	require.NoError(t, err)
	old := asV1(t, string(b))
	c, err := sysfs.DecodeCapture(strings.NewReader(old))
	require.NoError(t, err)
	assert.Contains(t, c.Note, "capture v1 has no end marker")
	want, err := sysfs.ParseCapture(bytes.NewReader(b))
	require.NoError(t, err)
	assert.True(t, equalEntries(want, c.Entries), "v1 and v2 hold the same entries")

	// A v1 capture cut short still reads: that is what the note says.
	ls := lines(old)
	cut, err := sysfs.DecodeCapture(strings.NewReader(join(ls[:len(ls)-5])))
	require.NoError(t, err)
	assert.Len(t, cut.Entries, len(want)-5)
	assert.NotEmpty(t, cut.Note)

	m, err := sysfs.ReadCapture(strings.NewReader(old))
	require.NoError(t, err)
	assert.Equal(t, c.Note, m.Note())
	m, err = sysfs.ReadCapture(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Empty(t, m.Note())

	dir := t.TempDir()
	p := filepath.Join(dir, "old.sysfs")
	require.NoError(t, os.WriteFile(p, []byte(old), 0o644))
	for path, note := range map[string]string{p: c.Note, p5Fixture: "", dir: ""} {
		r, err := sysfs.Open(path)
		require.NoError(t, err, path)
		assert.Equal(t, note, r.Note(), path)
		require.NoError(t, r.Close())
	}
}

// TestCapturePathBounds: a path the kernel could not open (PATH_MAX is
// 4096 bytes with its NUL) or deeper than MaxPathDepth is refused by the
// reader, naming the line, by NewMemFS and by WriteCapture.
func TestCapturePathBounds(t *testing.T) {
	t.Parallel()
	// deep is a path of n components making up size bytes.
	deep := func(n, size int) string {
		p := strings.Repeat("a/", n-1)
		return p + strings.Repeat("b", size-len(p))
	}
	longest := deep(3, 4095)
	deepest := deep(sysfs.MaxPathDepth, 200)
	for _, es := range [][]sysfs.Entry{
		{{Path: longest, Kind: sysfs.KindFile, Data: []byte("1\n")}},
		{{Path: deepest, Kind: sysfs.KindDir}},
		{{Path: "l", Kind: sysfs.KindLink, Target: deep(3, 4095)}},
	} {
		got, err := sysfs.ParseCapture(strings.NewReader(capture(t, nil, es)))
		require.NoError(t, err)
		m, err := sysfs.NewMemFS(got)
		require.NoError(t, err)
		if es[0].Kind != sysfs.KindLink {
			_, err = m.Stat(es[0].Path)
			assert.NoError(t, err)
		}
	}

	h := headerV1 + "\n# a comment\n" // v1, so that nothing but the bound fails
	for _, tc := range []struct {
		name, line, want string
	}{
		{"4096 bytes", "d " + deep(3, 4096), "line 3: path \"a/a/bbb"},
		{"4096 bytes quoted", `f "` + deep(3, 4096) + `" ""`, "is 4096 bytes, more than PATH_MAX allows (4095)"},
		{"a 256 KiB line of 131,000 components", "d " + deep(131000, 256<<10), "is 262144 bytes, more than PATH_MAX"},
		{"65 components", "d " + deep(sysfs.MaxPathDepth+1, 200), "line 3: path \"a/a/a"},
		{"65 components, count", "d " + deep(sysfs.MaxPathDepth+1, 200), "has 65 components, more than 64"},
		{"target of 4096 bytes", "l l " + deep(3, 4096), "line 3: link l: target is 4096 bytes, more than PATH_MAX allows"},
	} {
		_, err := sysfs.ParseCapture(strings.NewReader(h + tc.line + "\n"))
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), tc.want, tc.name)
		}
	}
	for name, e := range map[string]sysfs.Entry{
		"long":        {Path: deep(3, 4096), Kind: sysfs.KindFile},
		"deep":        {Path: deep(sysfs.MaxPathDepth+1, 200), Kind: sysfs.KindDir},
		"long target": {Path: "l", Kind: sysfs.KindLink, Target: deep(3, 4096)},
	} {
		_, err := sysfs.NewMemFS([]sysfs.Entry{e})
		assert.ErrorContains(t, err, "memfs: ", name)
		assert.ErrorContains(t, err, "more than", name)
		var buf bytes.Buffer
		err = sysfs.WriteCapture(&buf, nil, []sysfs.Entry{e})
		assert.ErrorContains(t, err, "capture: ", name)
		assert.ErrorContains(t, err, "more than", name)
	}
}

// TestCaptureLongestLine: the 64 KiB bound through a capture (a file one
// byte over MaxFileSize is ErrTooLarge to the Reader, one of MaxFileSize
// reads whole), and the longest entry a capture holds, every byte quoted
// at four, reads back; a file larger still is refused both ways.
func TestCaptureLongestLine(t *testing.T) {
	t.Parallel()
	m, err := sysfs.ReadCapture(strings.NewReader(capture(t, nil, tree())))
	require.NoError(t, err)
	r := sysread.New(m)
	_, err = r.ReadFile("big")
	assert.ErrorIs(t, err, sysfs.ErrTooLarge)
	b, err := r.ReadFile("exact")
	require.NoError(t, err)
	assert.Len(t, b, sysfs.MaxFileSize)

	// \x7f quotes as four bytes, in a path and in data alike.
	p := strings.Repeat("\x7f", 60) + "/" + strings.Repeat("\x7f", sysfs.MaxPathLen-61)
	worst := []sysfs.Entry{{Path: p, Kind: sysfs.KindFile, Data: bytes.Repeat([]byte{0xff}, sysfs.MaxFileSize+1), Mode: 0o600}}
	text := capture(t, nil, worst)
	assert.Greater(t, len(lines(text)[1]), 4*(sysfs.MaxFileSize+sysfs.MaxPathLen))
	got, err := sysfs.ParseCapture(strings.NewReader(text))
	require.NoError(t, err)
	assert.True(t, equalEntries(worst, got))

	over := []sysfs.Entry{{Path: "f", Kind: sysfs.KindFile, Data: make([]byte, sysfs.MaxFileSize+2)}}
	var buf bytes.Buffer
	assert.ErrorContains(t, sysfs.WriteCapture(&buf, nil, over), "capture: file f: 65538 bytes, more than a capture holds (65537)")
	line := fmt.Sprintf("f f %q", strings.Repeat("x", sysfs.MaxFileSize+2))
	_, err = sysfs.ParseCapture(strings.NewReader(headerV1 + "\n" + line + "\n"))
	assert.ErrorContains(t, err, "capture line 2: file f: 65538 bytes, more than a capture holds")
	// A line longer than any entry makes stops the reader at that line.
	_, err = sysfs.ParseCapture(strings.NewReader(headerV1 + "\n# " + strings.Repeat("#", 300<<10) + "\n"))
	assert.ErrorContains(t, err, "capture line 2: bufio.Scanner: token too long")
}

// TestMemFSErrors: NewMemFS refuses what no tree holds, the same path
// twice included, a directory as much as a file.
func TestMemFSErrors(t *testing.T) {
	t.Parallel()
	for name, es := range map[string][]sysfs.Entry{
		"file twice":      {{Path: "a", Kind: sysfs.KindFile}, {Path: "a", Kind: sysfs.KindFile}},
		"directory twice": {{Path: "a/b", Kind: sysfs.KindDir}, {Path: "a/b", Kind: sysfs.KindDir, Mode: 0o700}},
		"file and link":   {{Path: "a", Kind: sysfs.KindFile}, {Path: "a", Kind: sysfs.KindLink, Target: "b"}},
	} {
		_, err := sysfs.NewMemFS(es)
		assert.ErrorContains(t, err, `memfs: duplicate path "`, name)
	}
	for name, tc := range map[string]struct {
		es   []sysfs.Entry
		want string
	}{
		"under a file": {[]sysfs.Entry{{Path: "a/b", Kind: sysfs.KindFile}, {Path: "a/b/c/d", Kind: sysfs.KindFile}}, "memfs: a/b is not a directory"},
		"under a link": {[]sysfs.Entry{{Path: "a", Kind: sysfs.KindLink, Target: "b"}, {Path: "a/c", Kind: sysfs.KindFile}}, "memfs: a is not a directory"},
		"invalid":      {[]sysfs.Entry{{Path: "a//b", Kind: sysfs.KindFile}}, "memfs: invalid path"},
		"root":         {[]sysfs.Entry{{Path: ".", Kind: sysfs.KindDir}}, "memfs: invalid path"},
		"kind":         {[]sysfs.Entry{{Path: "a", Kind: 'x'}}, "memfs: a: unknown kind"},
	} {
		_, err := sysfs.NewMemFS(tc.es)
		assert.ErrorContains(t, err, tc.want, name)
	}
	// An implicit directory and the entries under it are found by path.
	m, err := sysfs.NewMemFS([]sysfs.Entry{
		{Path: "a/b-x", Kind: sysfs.KindFile}, {Path: "a/b/c", Kind: sysfs.KindFile},
		{Path: "a/b", Kind: sysfs.KindDir, Mode: 0o700},
	})
	require.NoError(t, err)
	fi, err := m.Lstat("a/b")
	require.NoError(t, err)
	assert.Equal(t, "drwx------", fi.Mode().String())
	ents, err := m.ReadDir("a")
	require.NoError(t, err)
	require.Len(t, ents, 2)
	assert.Equal(t, []string{"b", "b-x"}, []string{ents[0].Name(), ents[1].Name()})
}

// TestExampleCapture: the capture docs/library.md links, end marker
// included, reads.
func TestExampleCapture(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/example.capture")
	require.NoError(t, err)
	defer f.Close()
	es, err := sysfs.ParseCapture(f)
	require.NoError(t, err)
	assert.Len(t, es, 4)
}

// deepCapture is a capture of lines files, each depth components deep
// under a directory of its own, every component 63 bytes: the shape that
// made the reader quadratic in depth.
func deepCapture(tb testing.TB, lines, depth int) []byte {
	tb.Helper()
	var es []sysfs.Entry
	for i := range lines {
		parts := make([]string, depth)
		for j := range parts {
			parts[j] = fmt.Sprintf("%06d-%056d", i, j)
		}
		es = append(es, sysfs.Entry{Path: strings.Join(parts, "/"), Kind: sysfs.KindFile, Data: []byte("1\n")})
	}
	return []byte(capture(tb, nil, es))
}

// BenchmarkReadCaptureDeep parses and builds captures of deep paths at
// depth 6 and 60 (ten times the input): the time should grow about tenfold.
func BenchmarkReadCaptureDeep(b *testing.B) {
	for _, depth := range []int{6, 60} {
		in := deepCapture(b, 100, depth)
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				es, err := sysfs.ParseCapture(bytes.NewReader(in))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sysfs.NewMemFS(es); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func FuzzParseCapture(f *testing.F) {
	seed := capture(f, []string{"seed"}, small())
	f.Add(seed)
	f.Add(strings.Replace(seed, sysfs.CaptureHeader, headerV1, 1)[:strings.LastIndex(seed, "end ")])
	f.Add(seed[:strings.LastIndex(seed, "end ")])
	f.Add(headerV1 + "\nf a \"\\x00\\n\" 0644\nl b ../a\nd c\n")
	f.Add(headerV1 + "\nl a a\n")
	f.Add(headerV1 + "\nl 0 0 1") // found by the engine: a link's mode, which no capture writes
	f.Fuzz(func(t *testing.T, in string) {
		c, err := sysfs.DecodeCapture(strings.NewReader(in))
		if err != nil {
			return
		}
		m, err := sysfs.NewMemFS(c.Entries)
		if err != nil {
			return
		}
		// What parses writes back and parses to the same tree, checked.
		var out bytes.Buffer
		if err := sysfs.WriteCapture(&out, nil, m.Entries()); err != nil {
			t.Fatalf("write back: %v", err)
		}
		c2, err := sysfs.DecodeCapture(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("parse back: %v\n%s", err, out.String())
		}
		if c2.Note != "" {
			t.Fatalf("note on a capture written now: %s", c2.Note)
		}
		m2, err := sysfs.NewMemFS(c2.Entries)
		if err != nil {
			t.Fatal(err)
		}
		if !equalEntries(m.Entries(), m2.Entries()) {
			t.Fatalf("round trip changed the tree")
		}
		// Without its last line, the marker, it is cut short.
		cut := out.Bytes()[:bytes.LastIndexByte(out.Bytes()[:out.Len()-1], '\n')+1]
		if _, err := sysfs.ParseCapture(bytes.NewReader(cut)); err == nil {
			t.Fatalf("a capture without its end marker read:\n%s", cut)
		}
		// Resolving every path terminates and never panics.
		r := sysread.New(m)
		for _, e := range c.Entries {
			_, _ = r.Resolve(e.Path)
			_, _ = r.ReadFile(e.Path)
		}
	})
}
