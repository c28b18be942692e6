package sysfs

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// MemFS is an in-memory sysfs tree built from capture entries. It keeps
// symbolic links as links and permission bits as captured: a write-only
// attribute (mode 0200) cannot be opened, as on a live machine. It is
// read-only and safe for concurrent use.
type MemFS struct {
	root  *node
	index map[string]*node // every entry by its path in the tree
}

type node struct {
	name     string
	kind     Kind
	mode     fs.FileMode
	data     []byte
	target   string
	children []*node // sorted by name, directories only
}

// NewMemFS builds a MemFS from entries. Parent directories that the entries
// do not list are made as 0755 directories. An entry under a file or a link,
// or a path given twice, is an error.
func NewMemFS(entries []Entry) (*MemFS, error) {
	es := slices.Clone(entries)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	root := &node{kind: KindDir, mode: 0o755}
	index := map[string]*node{".": root}
	var mkdir func(p string) (*node, error)
	mkdir = func(p string) (*node, error) {
		if n, ok := index[p]; ok {
			if n.kind != KindDir {
				return nil, fmt.Errorf("memfs: %s is not a directory", p)
			}
			return n, nil
		}
		parent, err := mkdir(path.Dir(p))
		if err != nil {
			return nil, err
		}
		n := &node{name: path.Base(p), kind: KindDir, mode: 0o755}
		parent.children = append(parent.children, n)
		index[p] = n
		return n, nil
	}
	for _, e := range es {
		if !fs.ValidPath(e.Path) || e.Path == "." {
			return nil, fmt.Errorf("memfs: invalid path %q", e.Path)
		}
		if n, ok := index[e.Path]; ok {
			if e.Kind == KindDir && n.kind == KindDir && n != root {
				// made implicitly by an earlier child: take the mode
				n.mode = e.perm()
				continue
			}
			return nil, fmt.Errorf("memfs: duplicate path %q", e.Path)
		}
		parent, err := mkdir(path.Dir(e.Path))
		if err != nil {
			return nil, err
		}
		n := &node{name: path.Base(e.Path), kind: e.Kind, mode: e.perm(), data: e.Data, target: e.Target}
		switch e.Kind {
		case KindFile, KindDir, KindLink:
		default:
			return nil, fmt.Errorf("memfs: %s: unknown kind %q", e.Path, string(e.Kind))
		}
		parent.children = append(parent.children, n)
		index[e.Path] = n
	}
	for _, n := range index {
		slices.SortFunc(n.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	}
	return &MemFS{root: root, index: index}, nil
}

// lookup finds name. With follow, symbolic links in every component are
// followed (up to maxLinkHops); without, the last component is not.
func (m *MemFS) lookup(op, name string, follow bool) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	// Fast path: a path without links names an entry of the index, and
	// every proper prefix of it is a directory there.
	if n, ok := m.index[name]; ok && (n.kind != KindLink || !follow) {
		return n, nil
	}
	todo := splitPath(name)
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
			todo = append(splitPath(next.target), todo...)
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
	n, ok := m.index[name]
	if !ok {
		if _, err := m.lookup("open", name, false); err != nil {
			return nil, err
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: errLinkInPath}
	}
	if n.kind == KindLink {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errLinkInPath}
	}
	return m.openNode(name, n)
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

// Entries returns every entry of the tree, sorted by path: what
// WriteCapture writes.
func (m *MemFS) Entries() []Entry {
	var out []Entry
	var walk func(prefix string, n *node)
	walk = func(prefix string, n *node) {
		for _, c := range n.children {
			p := path.Join(prefix, c.name)
			out = append(out, Entry{Path: p, Kind: c.kind, Data: c.data, Target: c.target, Mode: c.mode})
			if c.kind == KindDir {
				walk(p, c)
			}
		}
	}
	walk("", m.root)
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
