package sysfs

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/efakit/efakit/internal/linkpath"
)

// MemFS is an in-memory sysfs tree built from capture entries. It keeps
// symbolic links as links and permission bits as captured: a write-only
// attribute (mode 0200) cannot be opened, as on a live machine. It is
// read-only and safe for concurrent use.
type MemFS struct {
	root *node
	// index holds every node by the hash of its path, chained through
	// node.same: one hash and a map lookup find any path.
	index map[uint64]*node
	seed  maphash.Seed
	note  string // from the capture it was read from, see Note
}

type node struct {
	name     string
	path     string // from the root; "." for the root
	same     *node  // the next node of index whose path hashes the same
	kind     Kind
	mode     fs.FileMode
	data     []byte
	target   string
	children []*node // sorted by name, directories only
}

// NewMemFS builds a MemFS from entries. Parent directories that the entries
// do not list are made as 0755 directories. An entry under a file or a link,
// a path given twice, or a path or link target beyond maxPathLen or
// maxPathDepth is an error.
func NewMemFS(entries []Entry) (*MemFS, error) {
	es := slices.Clone(entries)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	m := &MemFS{root: &node{path: ".", kind: KindDir, mode: 0o755}, index: make(map[uint64]*node, len(es)), seed: maphash.MakeSeed()}
	m.add(maphash.String(m.seed, "."), m.root)
	// Building takes time linear in the length of the paths: a node is
	// found from its parent by name, and the hash of its path grows with
	// each component. (Finding each parent by its whole path, as before,
	// was quadratic in depth: 48 s for one path of 131,000 components.)
	type key struct {
		dir  *node
		name string
	}
	nodes := make(map[key]*node, len(es))
	dirs := []*node{m.root}
	var h maphash.Hash
	h.SetSeed(m.seed)
	for _, e := range es {
		if err := checkPath(e.Path); err != nil {
			return nil, fmt.Errorf("memfs: %w", err)
		}
		switch e.Kind {
		case KindFile, KindDir:
		case KindLink:
			if err := checkTarget(e.Path, e.Target); err != nil {
				return nil, fmt.Errorf("memfs: %w", err)
			}
		default:
			return nil, fmt.Errorf("memfs: %s: unknown kind %q", e.Path, string(e.Kind))
		}
		h.Reset()
		dir, rest := m.root, e.Path
		for {
			name, tail, more := strings.Cut(rest, "/")
			end := len(e.Path) - len(rest) + len(name)
			if end > len(name) {
				h.WriteByte('/')
			}
			h.WriteString(name)
			k := key{dir, name}
			n := nodes[k]
			if !more {
				// Sorted, a directory comes before anything under it, so
				// a path found here was given before.
				if n != nil {
					return nil, fmt.Errorf("memfs: duplicate path %q", clip(e.Path))
				}
				n = &node{name: name, path: e.Path, kind: e.Kind, mode: e.perm(), data: e.Data, target: e.Target}
				nodes[k] = n
				m.add(h.Sum64(), n)
				dir.children = append(dir.children, n)
				if e.Kind == KindDir {
					dirs = append(dirs, n)
				}
				break
			}
			if n == nil {
				n = &node{name: name, path: e.Path[:end], kind: KindDir, mode: 0o755}
				nodes[k] = n
				m.add(h.Sum64(), n)
				dir.children = append(dir.children, n)
				dirs = append(dirs, n)
			} else if n.kind != KindDir {
				return nil, fmt.Errorf("memfs: %s is not a directory", n.path)
			}
			dir, rest = n, tail
		}
	}
	for _, n := range dirs {
		slices.SortFunc(n.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	}
	return m, nil
}

// add puts n, whose path hashes to sum, in the index.
func (m *MemFS) add(sum uint64, n *node) {
	n.same = m.index[sum]
	m.index[sum] = n
}

// get returns the node of path p, or nil.
func (m *MemFS) get(p string) *node {
	for n := m.index[maphash.String(m.seed, p)]; n != nil; n = n.same {
		if n.path == p {
			return n
		}
	}
	return nil
}

// Note is the note of the capture the tree was read from (capture.Note):
// empty unless the capture could not be checked whole.
func (m *MemFS) Note() string { return m.note }

// Note is the note of the capture the root was read from (capture.Note),
// for the caller to show; empty for a directory and a checked capture.
func (r *Root) Note() string {
	if m, ok := r.ReadLinkFS.(*MemFS); ok {
		return m.Note()
	}
	return ""
}

// lookup finds name. With follow, symbolic links in every component are
// followed (up to maxLinkHops); without, the last component is not.
func (m *MemFS) lookup(op, name string, follow bool) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	// Fast path: a path without links names a node of the index, and
	// every proper prefix of it is a directory there.
	if n := m.get(name); n != nil && (n.kind != KindLink || !follow) {
		return n, nil
	}
	todo := linkpath.Split(name)
	var stack []*node // ancestors of cur, for ".."
	cur := m.root
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return nil, &fs.PathError{Op: op, Path: name, Err: ErrEscapesRoot}
			}
			cur, stack = stack[len(stack)-1], stack[:len(stack)-1]
			continue
		}
		if cur.kind != KindDir {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		next := cur.child(c)
		if next == nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if next.kind == KindLink && (follow || len(todo) > 0) {
			hops++
			if hops > maxLinkHops {
				return nil, &fs.PathError{Op: op, Path: name, Err: ErrLinkLoop}
			}
			if path.IsAbs(next.target) {
				return nil, &fs.PathError{Op: op, Path: name, Err: ErrEscapesRoot}
			}
			todo = append(linkpath.Split(next.target), todo...)
			continue
		}
		stack = append(stack, cur)
		cur = next
	}
	return cur, nil
}

func (n *node) child(name string) *node {
	i, ok := slices.BinarySearchFunc(n.children, name, func(c *node, s string) int { return strings.Compare(c.name, s) })
	if !ok {
		return nil
	}
	return n.children[i]
}

// Open opens name, following symbolic links inside the tree.
func (m *MemFS) Open(name string) (fs.File, error) {
	n, err := m.lookup("open", name, true)
	if err != nil {
		return nil, err
	}
	return m.openNode(name, n)
}

func (m *MemFS) openNode(name string, n *node) (fs.File, error) {
	if n.mode&0o444 == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	if n.kind == KindDir {
		return &memDir{node: n}, nil
	}
	return &memFile{node: n, r: bytes.NewReader(n.data)}, nil
}

// OpenNoFollow opens name only when no component of it is a symbolic link.
func (m *MemFS) OpenNoFollow(name string) (fs.File, error) {
	n, err := m.noFollow("open", name)
	if err != nil {
		return nil, err
	}
	return m.openNode(name, n)
}

// noFollow finds name when no component of it is a symbolic link, as
// openat2(2) with RESOLVE_NO_SYMLINKS does: linkpath.ErrLinkInPath at the first
// link on the way, whatever lies beyond it; fs.ErrNotExist when a
// component is missing before any link.
func (m *MemFS) noFollow(op, name string) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if n := m.get(name); n != nil {
		if n.kind == KindLink {
			return nil, &fs.PathError{Op: op, Path: name, Err: linkpath.ErrLinkInPath}
		}
		return n, nil
	}
	// Some component is missing, or is a link (nothing below a link is
	// indexed): the first one that is not a directory says which.
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '/' {
			continue
		}
		n := m.get(name[:i])
		switch {
		case n == nil:
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		case n.kind == KindLink:
			return nil, &fs.PathError{Op: op, Path: name, Err: linkpath.ErrLinkInPath}
		case n.kind != KindDir:
			return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%s is not a directory", name[:i])}
		}
	}
	return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// ReadLink returns the target of the link name.
func (m *MemFS) ReadLink(name string) (string, error) {
	n, err := m.lookup("readlink", name, false)
	if err != nil {
		return "", err
	}
	if n.kind != KindLink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return n.target, nil
}

// Lstat describes name without following a final link.
func (m *MemFS) Lstat(name string) (fs.FileInfo, error) {
	n, err := m.lookup("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return info{n}, nil
}

// Stat describes name, following links.
func (m *MemFS) Stat(name string) (fs.FileInfo, error) {
	n, err := m.lookup("stat", name, true)
	if err != nil {
		return nil, err
	}
	return info{n}, nil
}

// ReadDir lists the directory name, sorted by file name.
func (m *MemFS) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := m.lookup("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if n.kind != KindDir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("not a directory")}
	}
	if n.mode&0o444 == 0 {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrPermission}
	}
	out := make([]fs.DirEntry, len(n.children))
	for i, c := range n.children {
		out[i] = fs.FileInfoToDirEntry(info{c})
	}
	return out, nil
}

// ReadDirNoFollow lists name only when no component of it is a symbolic
// link.
func (m *MemFS) ReadDirNoFollow(name string) ([]fs.DirEntry, error) {
	if _, err := m.noFollow("readdir", name); err != nil {
		return nil, err
	}
	return m.ReadDir(name)
}

// Entries returns every entry of the tree, sorted by path: what
// WriteCapture writes.
func (m *MemFS) Entries() []Entry {
	var out []Entry
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.children {
			out = append(out, Entry{Path: c.path, Kind: c.kind, Data: c.data, Target: c.target, Mode: c.mode})
			if c.kind == KindDir {
				walk(c)
			}
		}
	}
	walk(m.root)
	return out
}

type info struct{ n *node }

func (i info) Name() string {
	if i.n.name == "" {
		return "."
	}
	return i.n.name
}
func (i info) Size() int64 { return int64(len(i.n.data)) }
func (i info) Mode() fs.FileMode {
	switch i.n.kind {
	case KindDir:
		return fs.ModeDir | i.n.mode
	case KindLink:
		return fs.ModeSymlink | i.n.mode
	}
	return i.n.mode
}
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.n.kind == KindDir }
func (i info) Sys() any           { return nil }

type memFile struct {
	node *node
	r    *bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return info{f.node}, nil }
func (f *memFile) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *memFile) Close() error               { return nil }

type memDir struct {
	node *node
	off  int
}

func (d *memDir) Stat() (fs.FileInfo, error) { return info{d.node}, nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.node.name, Err: fmt.Errorf("is a directory")}
}
func (d *memDir) Close() error { return nil }
func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.node.children[d.off:]
	if n > 0 && len(rest) > n {
		rest = rest[:n]
	}
	d.off += len(rest)
	out := make([]fs.DirEntry, len(rest))
	for i, c := range rest {
		out[i] = fs.FileInfoToDirEntry(info{c})
	}
	if n > 0 && len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}
