package sysfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// CaptureHeader is the first line of every capture file.
const CaptureHeader = "efakit-sysfs-capture v1"

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
//	efakit-sysfs-capture v1
//	# comments and blank lines are ignored
//	d devices/system/node/node0
//	f devices/pci0000:44/0000:44:00.0/vendor "0x1d0f\n"
//	f devices/pci0000:44/0000:44:00.0/remove "" 0200
//	l bus/pci/devices/0000:44:00.0 ../../../devices/pci0000:44/0000:44:00.0
//
// A field is a bare word (no space, quote or '#') or a Go-quoted string; the
// file's data is always quoted, so that trailing newlines, or their absence,
// survive. An optional last field is the permission in octal.

// ParseCapture reads a capture. It rejects duplicate or invalid paths and
// anything it does not understand, naming the line.
func ParseCapture(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4*MaxFileSize+1024)
	line := 0
	var out []Entry
	seen := make(map[string]bool)
	sawHeader := false
	for sc.Scan() {
		line++
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if !sawHeader {
			if trimmed != CaptureHeader {
				return nil, fmt.Errorf("capture line %d: want header %q, got %q", line, CaptureHeader, clip(trimmed))
			}
			sawHeader = true
			continue
		}
		e, err := parseEntry(trimmed)
		if err != nil {
			return nil, fmt.Errorf("capture line %d: %w", line, err)
		}
		if seen[e.Path] {
			return nil, fmt.Errorf("capture line %d: duplicate path %q", line, e.Path)
		}
		seen[e.Path] = true
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("capture line %d: %w", line+1, err)
	}
	if !sawHeader {
		return nil, fmt.Errorf("capture: empty, want header %q", CaptureHeader)
	}
	return out, nil
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
	if !fs.ValidPath(e.Path) || e.Path == "." {
		return Entry{}, fmt.Errorf("invalid path %q", clip(e.Path))
	}
	rest := fields[2:]
	switch e.Kind {
	case KindDir:
	case KindFile:
		if len(rest) == 0 {
			return Entry{}, fmt.Errorf("file %s: missing data", e.Path)
		}
		e.Data = []byte(rest[0])
		rest = rest[1:]
	case KindLink:
		if len(rest) == 0 || rest[0] == "" {
			return Entry{}, fmt.Errorf("link %s: missing target", e.Path)
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
// lines of header (without their "# ") at the top.
func WriteCapture(w io.Writer, header []string, entries []Entry) error {
	es := slices.Clone(entries)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	for i := 1; i < len(es); i++ {
		if es[i].Path == es[i-1].Path {
			return fmt.Errorf("capture: duplicate path %q", es[i].Path)
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, CaptureHeader)
	for _, h := range header {
		fmt.Fprintf(bw, "# %s\n", h)
	}
	for _, e := range es {
		if !fs.ValidPath(e.Path) || e.Path == "." {
			return fmt.Errorf("capture: invalid path %q", e.Path)
		}
		var b bytes.Buffer
		b.WriteByte(byte(e.Kind))
		b.WriteByte(' ')
		b.WriteString(field(e.Path))
		switch e.Kind {
		case KindFile:
			b.WriteByte(' ')
			b.WriteString(strconv.Quote(string(e.Data)))
		case KindLink:
			b.WriteByte(' ')
			b.WriteString(field(e.Target))
		case KindDir:
		default:
			return fmt.Errorf("capture: %s: unknown kind %q", e.Path, string(e.Kind))
		}
		if e.Kind != KindLink && e.Mode.Perm() != 0 && e.Mode.Perm() != (Entry{Kind: e.Kind}).perm() {
			fmt.Fprintf(&b, " %04o", uint32(e.Mode.Perm()))
		}
		b.WriteByte('\n')
		bw.Write(b.Bytes())
	}
	return bw.Flush()
}

// field writes s bare when it can be read back bare, quoted otherwise.
func field(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"#\\") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}
