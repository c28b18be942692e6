package sysfs

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// captureHeader is the first line of every capture WriteCapture writes.
const captureHeader = "efakit-sysfs-capture v2"

// captureHeaderV1 is the header of captures written before the end marker.
// They still read, with a note (capture.Note).
const captureHeaderV1 = "efakit-sysfs-capture v1"

// Bounds on the paths a capture holds, so that a hostile capture cannot
// make the reader slow or the tree absurd.
const (
	// maxPathLen is the longest path or link target, in bytes: Linux's
	// PATH_MAX is 4096 with the terminating NUL, so no longer path can be
	// opened and no longer link written.
	maxPathLen = 4095
	// maxPathDepth is the most components a path may have. The deepest
	// paths of the fixtures have 12 (p5's EFA GIDs, behind two switch
	// levels), the deepest of a live /sys seen here 13; 64 leaves room
	// for some 25 more PCIe switch levels than p5 has.
	maxPathDepth = 64
)

// maxCaptureLine is the longest line an entry can make: a path and the
// data of a file one byte over MaxFileSize, both quoted with every byte
// escaped (\xff, four bytes for one), and a mode.
const maxCaptureLine = len("f ") + 2 + 4*maxPathLen + len(" ") + 2 + 4*(MaxFileSize+1) + len(" 0777")

// noteV1 is the capture.Note of a v1 capture.
const noteV1 = "capture v1 has no end marker: one cut short or edited cannot be told from a whole one"

// Kind is the type of a captured entry.
type Kind byte

// The kinds of entry a capture holds.
const (
	KindFile Kind = 'f'
	KindDir  Kind = 'd'
	KindLink Kind = 'l'
)

// Entry is one file, directory or symbolic link of a capture, with its path
// relative to the sysfs root.
type Entry struct {
	Path   string
	Kind   Kind
	Data   []byte      // KindFile: the exact bytes read
	Target string      // KindLink: the link as the kernel wrote it
	Mode   fs.FileMode // permission bits; zero means 0444 for files, 0755 for directories
}

// perm returns the entry's permission bits with the kind's default.
func (e Entry) perm() fs.FileMode {
	if e.Mode != 0 {
		return e.Mode.Perm()
	}
	switch e.Kind {
	case KindDir:
		return 0o755
	case KindLink:
		return 0o777
	}
	return 0o444
}

// A capture is a text file, one entry a line, sorted by path, so that a
// change to a fixture reads as a plain line diff:
//
//	efakit-sysfs-capture v2
//	# comments and blank lines are ignored
//	d devices/system/node/node0
//	f devices/pci0000:44/0000:44:00.0/vendor "0x1d0f\n"
//	f devices/pci0000:44/0000:44:00.0/remove "" 0200
//	l bus/pci/devices/0000:44:00.0 ../../../devices/pci0000:44/0000:44:00.0
//	end 4 sha256:<64 hex digits>
//
// A field is a bare word (no space, quote or '#') or a Go-quoted string; the
// file's data is always quoted, so that trailing newlines, or their absence,
// survive. An optional last field is the permission in octal.
//
// The end marker, the last line but comments, counts the entry lines and
// holds the SHA-256 of their text (each without surrounding blanks, ended
// by a newline), so that a capture cut at a line boundary, or with entry
// lines added, removed, changed or reordered, is an error rather than a
// smaller machine. Comments are outside the sum: they are notes for people
// (where a capture came from, what a fixture infers) and change nothing
// that is read, so they can be added or corrected by hand. Version 1, from
// before the marker, reads with a note.

// capture is a parsed capture file.
type capture struct {
	Entries []Entry
	// Note, when set, is for the person who gave the capture: a v1
	// capture has no end marker, so whether it is whole is unknown.
	Note string
}

// ParseCapture reads a capture's entries in the file's order, with the
// checks ReadCapture makes, without building a MemFS.
func ParseCapture(r io.Reader) ([]Entry, error) {
	c, err := decodeCapture(r)
	if err != nil {
		return nil, err
	}
	return c.Entries, nil
}

// decodeCapture reads a capture and checks its end marker. It rejects
// duplicate, invalid, over-long or over-deep paths, a missing or wrong end
// marker and anything it does not understand, naming the line.
func decodeCapture(r io.Reader) (*capture, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxCaptureLine+1) // +1: the newline
	line := 0
	var out []Entry
	seen := make(map[string]bool)
	version := 0 // until the header
	sum := sha256.New()
	endLine := 0 // the end marker's, once read
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		text := string(b)
		switch {
		case version == 0:
			switch text {
			case captureHeader:
				version = 2
			case captureHeaderV1:
				version = 1
			default:
				return nil, fmt.Errorf("capture line %d: want header %q, got %q", line, captureHeader, clip(text))
			}
			continue
		case endLine != 0:
			return nil, fmt.Errorf("capture line %d: %q after the end marker of line %d", line, clip(text), endLine)
		case firstWord(text) == "end":
			if version == 1 {
				return nil, fmt.Errorf("capture line %d: end marker in a v1 capture (the header must say v2)", line)
			}
			if err := checkEnd(text, len(out), sum); err != nil {
				return nil, fmt.Errorf("capture line %d: %w", line, err)
			}
			endLine = line
			continue
		}
		e, err := parseEntry(text)
		if err != nil {
			return nil, fmt.Errorf("capture line %d: %w", line, err)
		}
		if seen[e.Path] {
			return nil, fmt.Errorf("capture line %d: duplicate path %q", line, clip(e.Path))
		}
		seen[e.Path] = true
		out = append(out, e)
		sum.Write(b)
		sum.Write([]byte{'\n'})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("capture line %d: %w", line+1, err)
	}
	switch {
	case version == 0:
		return nil, fmt.Errorf("capture: empty, want header %q", captureHeader)
	case version == 1:
		return &capture{Entries: out, Note: noteV1}, nil
	case endLine == 0:
		return nil, fmt.Errorf("capture: cut short: no end marker after line %d, the last", line)
	}
	return &capture{Entries: out}, nil
}

// firstWord returns s up to its first space or tab.
func firstWord(s string) string {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

// endMarker is the end marker of n entry lines whose text hashes to sum.
func endMarker(n int, sum hash.Hash) string {
	return fmt.Sprintf("end %d sha256:%x", n, sum.Sum(nil))
}

// checkEnd compares the end marker text with the n entry lines read and
// their sum.
func checkEnd(text string, n int, sum hash.Hash) error {
	bad := fmt.Errorf("bad end marker %q, want \"end <entries> sha256:<64 hex digits>\"", clip(text))
	f := strings.Fields(text)
	if len(f) != 3 {
		return bad
	}
	count, err := strconv.Atoi(f[1])
	h, ok := strings.CutPrefix(f[2], "sha256:")
	if err != nil || count < 0 || strconv.Itoa(count) != f[1] || !ok || len(h) != hex.EncodedLen(sha256.Size) || strings.ToLower(h) != h {
		return bad
	}
	if _, err := hex.DecodeString(h); err != nil {
		return bad
	}
	if count != n {
		return fmt.Errorf("the end marker counts %d entries, the capture holds %d: entry lines were removed or added", count, n)
	}
	if endMarker(n, sum) != strings.Join(f, " ") {
		return fmt.Errorf("the entry lines do not match the end marker's SHA-256: a line was changed")
	}
	return nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func parseEntry(s string) (Entry, error) {
	fields, err := splitFields(s)
	if err != nil {
		return Entry{}, err
	}
	if len(fields) < 2 {
		return Entry{}, fmt.Errorf("want a kind and a path, got %q", clip(s))
	}
	if len(fields[0]) != 1 {
		return Entry{}, fmt.Errorf("unknown entry kind %q", clip(fields[0]))
	}
	e := Entry{Kind: Kind(fields[0][0]), Path: fields[1]}
	if err := checkPath(e.Path); err != nil {
		return Entry{}, err
	}
	rest := fields[2:]
	switch e.Kind {
	case KindDir:
	case KindFile:
		if len(rest) == 0 {
			return Entry{}, fmt.Errorf("file %s: missing data", e.Path)
		}
		if err := checkData(e.Path, rest[0]); err != nil {
			return Entry{}, err
		}
		e.Data = []byte(rest[0])
		rest = rest[1:]
	case KindLink:
		if len(rest) == 0 {
			return Entry{}, fmt.Errorf("link %s: missing target", e.Path)
		}
		if err := checkTarget(e.Path, rest[0]); err != nil {
			return Entry{}, err
		}
		e.Target = rest[0]
		rest = rest[1:]
	default:
		return Entry{}, fmt.Errorf("unknown entry kind %q", string(e.Kind))
	}
	if len(rest) > 1 {
		return Entry{}, fmt.Errorf("%s: %d unexpected fields", e.Path, len(rest)-1)
	}
	if len(rest) == 1 {
		// A link's own mode means nothing on Linux, and none is written.
		if e.Kind == KindLink {
			return Entry{}, fmt.Errorf("link %s: a link has no mode", e.Path)
		}
		m, err := strconv.ParseUint(rest[0], 8, 32)
		// Zero stands for "the default" in an Entry, so 0000 is refused:
		// sysfs has write-only (0200) files, not files without any bit.
		if err != nil || m == 0 || m > 0o777 {
			return Entry{}, fmt.Errorf("%s: bad mode %q", e.Path, clip(rest[0]))
		}
		e.Mode = fs.FileMode(m)
	}
	return e, nil
}

// checkPath refuses a path that no capture holds: not a valid fs path, the
// root itself, longer than maxPathLen or deeper than maxPathDepth.
func checkPath(p string) error {
	if len(p) > maxPathLen {
		return fmt.Errorf("path %q is %d bytes, more than PATH_MAX allows (%d)", clip(p), len(p), maxPathLen)
	}
	if !fs.ValidPath(p) || p == "." {
		return fmt.Errorf("invalid path %q", clip(p))
	}
	if d := strings.Count(p, "/") + 1; d > maxPathDepth {
		return fmt.Errorf("path %q has %d components, more than %d", clip(p), d, maxPathDepth)
	}
	return nil
}

// checkTarget refuses an empty or over-long link target: the kernel writes
// none longer than maxPathLen.
func checkTarget(p, target string) error {
	if target == "" {
		return fmt.Errorf("link %s: missing target", p)
	}
	if len(target) > maxPathLen {
		return fmt.Errorf("link %s: target is %d bytes, more than PATH_MAX allows (%d)", p, len(target), maxPathLen)
	}
	return nil
}

// checkData refuses a file of more than MaxFileSize+1 bytes: no reader
// reads further than the byte that makes it too large, and the bound keeps
// every entry within a line the reader takes, however its bytes are quoted.
func checkData[T string | []byte](p string, data T) error {
	if len(data) > MaxFileSize+1 {
		return fmt.Errorf("file %s: %d bytes, more than a capture holds (%d)", p, len(data), MaxFileSize+1)
	}
	return nil
}

func splitFields(s string) ([]string, error) {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return out, nil
		}
		if s[0] == '"' {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("bad quoted field %q", clip(s))
			}
			u, err := strconv.Unquote(q)
			if err != nil {
				return nil, fmt.Errorf("bad quoted field %q", clip(q))
			}
			out = append(out, u)
			s = s[len(q):]
			if s != "" && s[0] != ' ' && s[0] != '\t' {
				return nil, fmt.Errorf("no space after quoted field %q", clip(q))
			}
			continue
		}
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			i = len(s)
		}
		w := s[:i]
		if strings.ContainsAny(w, "\"#") {
			return nil, fmt.Errorf("bare field %q holds a quote or '#'", clip(w))
		}
		out = append(out, w)
		s = s[i:]
	}
}

// WriteCapture writes entries as a capture, sorted by path, with the comment
// lines of header (without their "# ") at the top and the end marker last.
// It refuses what ParseCapture would.
func WriteCapture(w io.Writer, header []string, entries []Entry) error {
	es := slices.Clone(entries)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	for i := 1; i < len(es); i++ {
		if es[i].Path == es[i-1].Path {
			return fmt.Errorf("capture: duplicate path %q", clip(es[i].Path))
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, captureHeader)
	for _, h := range header {
		// A newline in a note must not end the comment.
		for _, l := range strings.Split(h, "\n") {
			fmt.Fprintf(bw, "# %s\n", l)
		}
	}
	sum := sha256.New()
	var b bytes.Buffer
	for _, e := range es {
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		b.Reset()
		b.WriteByte(byte(e.Kind))
		b.WriteByte(' ')
		b.WriteString(field(e.Path))
		switch e.Kind {
		case KindFile:
			if err := checkData(e.Path, e.Data); err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			b.WriteByte(' ')
			b.WriteString(strconv.Quote(string(e.Data)))
		case KindLink:
			if err := checkTarget(e.Path, e.Target); err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			b.WriteByte(' ')
			b.WriteString(field(e.Target))
		case KindDir:
		default:
			return fmt.Errorf("capture: %s: unknown kind %q", e.Path, string(e.Kind))
		}
		if e.Kind != KindLink && e.Mode.Perm() != 0 && e.Mode.Perm() != (Entry{Kind: e.Kind}).perm() {
			fmt.Fprintf(&b, " %04o", uint32(e.Mode.Perm()))
		}
		sum.Write(b.Bytes()) // as the reader sums it: no line ends in a blank
		sum.Write([]byte{'\n'})
		b.WriteByte('\n')
		bw.Write(b.Bytes())
	}
	fmt.Fprintln(bw, endMarker(len(es), sum))
	return bw.Flush()
}

// field writes s bare when it can be read back bare, quoted otherwise.
func field(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"#\\") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}
