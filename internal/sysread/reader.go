// Package sysread is how efakit's readers read a sysfs root: every
// symbolic link resolved inside the root, a link that leaves the root,
// loops or dangles an error for that entry, no file read without a size
// bound, and what one pass learned (which entries are links, where they
// point, what a directory holds) remembered, so that one discovery never
// asks the file system the same question twice. A Reader is an
// fs.ReadLinkFS, and New of a Reader is that Reader: the readers of one
// pass (pcie, efa, host, neuron) share it through their fs.FS arguments.
package sysread

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/linkpath"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/sysfs"
)

// maxLinkHops is the number of symbolic links followed while resolving one
// path, as the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// Reader reads one sysfs root. It remembers what it has learned about the
// tree (which entries are links, where they point, what a directory holds),
// so one discovery never asks the file system the same question twice.
// A Reader is meant for one discovery pass and is not safe for concurrent
// use; create a new one for each pass so that changes on a live machine are
// seen.
type Reader struct {
	fsys fs.ReadLinkFS
	// kind caches the type of an entry whose parent is fully resolved:
	// fs.ModeSymlink, fs.ModeDir, or 0 for a regular file.
	kind map[string]fs.FileMode
	// link caches the target of a symbolic link.
	link map[string]string
	// real caches the resolved form of a path.
	real map[string]string
	// dirs caches directory listings by resolved path.
	dirs map[string][]fs.DirEntry
	// gone remembers what was found missing, by the name asked for
	// (ReadFile, ReadDir) and by resolved path (kindOf), so that a file
	// or directory that is not there is looked for once.
	gone map[string]error
	// buf is the page every file is read into first.
	buf []byte
	// lean, when set, says which optional attributes the pass reads.
	lean *Lean
}

// New returns a Reader of fsys: any fs.FS, such as os.DirFS("/sys"),
// a Root, a MemFS or an fstest.MapFS. A Reader is itself an fs.ReadLinkFS,
// and New of a Reader returns that Reader, so that the readers of
// one pass (pcie, efa, host, neuron) share what it learned. A root that
// cannot read links (no fs.ReadLinkFS) fails at the first link.
func New(fsys fs.FS) *Reader {
	if r, ok := fsys.(*Reader); ok {
		return r
	}
	if root, ok := fsys.(*sysfs.Root); ok {
		fsys = root.ReadLinkFS // its optional interfaces, such as noFollowOpener
	}
	rl, ok := fsys.(fs.ReadLinkFS)
	if !ok {
		rl = noLinkFS{fsys}
	}
	return &Reader{
		fsys: rl,
		kind: make(map[string]fs.FileMode),
		link: make(map[string]string),
		real: make(map[string]string),
		dirs: make(map[string][]fs.DirEntry),
		gone: make(map[string]error),
	}
}

// FS returns the file system the Reader reads.
func (r *Reader) FS() fs.ReadLinkFS { return r.fsys }

// A Reader is an fs.FS with links.
var _ fs.ReadLinkFS = (*Reader)(nil)

// noLinkFS is an fs.FS without links: it reads no link, and every entry
// is what fs.Stat says.
type noLinkFS struct{ fs.FS }

func (n noLinkFS) ReadLink(name string) (string, error) {
	return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("%w: the root is not an fs.ReadLinkFS", errors.ErrUnsupported)}
}

func (n noLinkFS) Lstat(name string) (fs.FileInfo, error) { return fs.Stat(n.FS, name) }

// Open opens name, every link on its way resolved inside the root:
// the Reader as an fs.FS.
func (r *Reader) Open(name string) (fs.File, error) {
	p, err := r.Resolve(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fserr.Cause(err)}
	}
	f, err := r.fsys.Open(p)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fserr.Cause(err)}
	}
	return f, nil
}

// Lstat describes name without following it if it is a link, its parent
// directories resolved inside the root.
func (r *Reader) Lstat(name string) (fs.FileInfo, error) {
	if name == "." {
		return r.fsys.Lstat(".")
	}
	dir, base := path.Split(name)
	rdir, err := r.Resolve(path.Clean(dir + "."))
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fserr.Cause(err)}
	}
	fi, err := r.fsys.Lstat(path.Join(rdir, base))
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fserr.Cause(err)}
	}
	return fi, nil
}

// Resolve returns the path of name with every symbolic link resolved, all
// inside the root. The result names the entry itself; when name is a link to
// nothing, Resolve fails with sysfs.ErrDanglingLink.
func (r *Reader) Resolve(name string) (string, error) {
	if p, ok := r.real[name]; ok {
		return p, nil
	}
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "resolve", Path: name, Err: fs.ErrInvalid}
	}
	hops := 0
	p, err := r.resolve(name, &hops, "")
	if err != nil {
		return "", &fs.PathError{Op: "resolve", Path: name, Err: err}
	}
	return p, nil
}

// resolve resolves a clean root-relative path. The parent is resolved
// first (and remembered), so that a file in a known directory costs one
// look-up of its own name. A link target is joined to its link's resolved
// directory, where ".." is lexical because that directory holds no links.
func (r *Reader) resolve(name string, hops *int, via string) (string, error) {
	if name == "." {
		return ".", nil
	}
	if p, ok := r.real[name]; ok {
		return p, nil
	}
	dir, base := "", name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		dir, base = name[:i], name[i+1:]
	}
	p := base
	if dir != "" {
		rdir, err := r.resolve(dir, hops, via)
		if err != nil {
			return "", err
		}
		if rdir != "." {
			p = rdir + "/" + base
		}
		if k, ok := r.kind[rdir]; ok && k != fs.ModeDir {
			return "", fmt.Errorf("%s is not a directory", rdir)
		}
	}
	k, err := r.kindOf(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && via != "" {
			return "", linkErr(sysfs.ErrDanglingLink, via)
		}
		return "", err
	}
	if k != fs.ModeSymlink {
		r.real[name] = p
		return p, nil
	}
	*hops++
	if *hops > maxLinkHops {
		return "", linkErr(sysfs.ErrLinkLoop, p)
	}
	target, err := r.readLink(p)
	if err != nil {
		return "", err
	}
	via = p + " -> " + names.Printable(target)
	if path.IsAbs(target) {
		return "", linkErr(sysfs.ErrEscapesRoot, via)
	}
	var rp string
	if linkpath.ClimbsAfterName(target) {
		rp, err = r.follow(path.Dir(p), target, hops, via)
	} else {
		j := path.Join(path.Dir(p), target)
		if j == ".." || strings.HasPrefix(j, "../") {
			return "", linkErr(sysfs.ErrEscapesRoot, via)
		}
		rp, err = r.resolve(j, hops, via)
	}
	if err != nil {
		return "", err
	}
	r.real[name] = rp
	return rp, nil
}

// follow resolves target from the resolved directory dir as the kernel
// does: each name before a ".." is resolved, links and all, before the
// ".." climbs from where it led.
func (r *Reader) follow(dir, target string, hops *int, via string) (string, error) {
	cur := dir
	var names []string
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(names) > 0 {
				rp, err := r.resolve(path.Join(append([]string{cur}, names...)...), hops, via)
				if err != nil {
					return "", err
				}
				if k := r.kind[rp]; rp != "." && k != fs.ModeDir {
					return "", fmt.Errorf("%s is not a directory", rp)
				}
				cur, names = rp, nil
			}
			if cur == "." {
				return "", linkErr(sysfs.ErrEscapesRoot, via)
			}
			cur = path.Dir(cur)
		default:
			names = append(names, c)
		}
	}
	return r.resolve(path.Join(append([]string{cur}, names...)...), hops, via)
}

func linkErr(err error, via string) error {
	if via == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, via)
}

// kindOf returns the type of p, whose parent must be resolved already.
func (r *Reader) kindOf(p string) (fs.FileMode, error) {
	if k, ok := r.kind[p]; ok {
		return k, nil
	}
	if err, ok := r.gone["\x00"+p]; ok {
		return 0, err
	}
	fi, err := r.fsys.Lstat(p)
	if err != nil {
		err = fserr.Cause(err)
		if errors.Is(err, fs.ErrNotExist) {
			r.gone["\x00"+p] = err
		}
		return 0, err
	}
	k := fi.Mode().Type() & (fs.ModeSymlink | fs.ModeDir)
	r.kind[p] = k
	return k, nil
}

func (r *Reader) readLink(p string) (string, error) {
	if t, ok := r.link[p]; ok {
		return t, nil
	}
	t, err := r.fsys.ReadLink(p)
	if err != nil {
		return "", fserr.Cause(err)
	}
	r.link[p] = t
	return t, nil
}

// ReadLink returns the target of the symbolic link name, whose parent
// directories are resolved first. It does not follow the link itself.
func (r *Reader) ReadLink(name string) (string, error) {
	dir, base := path.Split(name)
	rdir, err := r.Resolve(path.Clean(dir + "."))
	if err != nil {
		return "", err
	}
	p := path.Join(rdir, base)
	k, err := r.kindOf(p)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	if k != fs.ModeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: errors.New("not a symbolic link")}
	}
	t, err := r.readLink(p)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

// ReadDir lists the directory name after resolving it.
func (r *Reader) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, _, err := r.readDir(name, false)
	return ents, err
}

// ReadDirLinks is ReadDir that also reads the target of every symbolic
// link in the directory, for a caller that will follow them all (such as
// bus/pci/devices): on a directory root each costs one readlinkat(2)
// relative to the open directory, not an open, a read and a close.
func (r *Reader) ReadDirLinks(name string) ([]fs.DirEntry, error) {
	ents, _, err := r.readDir(name, true)
	return ents, err
}

// noFollowLister lists a directory only when no component of its path is
// a symbolic link, failing with linkpath.ErrLinkInPath otherwise.
type noFollowLister interface {
	ReadDirNoFollow(name string) ([]fs.DirEntry, error)
}

// linkLister lists a directory and reads its links' targets in one pass,
// refusing links in the directory's own path as noFollowLister does.
type linkLister interface {
	ReadDirLinks(name string) ([]fs.DirEntry, map[string]string, error)
}

func (r *Reader) readDir(name string, links bool) ([]fs.DirEntry, string, error) {
	if p, ok := r.real[name]; ok {
		if ents, ok := r.dirs[p]; ok && (!links || r.linksRead(p, ents)) {
			return ents, p, nil
		}
	}
	if err, ok := r.gone[name]; ok {
		return nil, "", err
	}
	// Where the root can refuse links on the way, list the directory
	// where the Reader expects it without resolving each component
	// first: success proves there was no link to resolve.
	if nl, ok := r.fsys.(noFollowLister); ok && fs.ValidPath(name) {
		if p, hops, ok := r.guess(name); ok {
			if k, known := r.kind[p]; !known || k == fs.ModeDir {
				var ents []fs.DirEntry
				var targets map[string]string
				var err error
				if ll, ok := r.fsys.(linkLister); ok && links {
					ents, targets, err = ll.ReadDirLinks(p)
				} else {
					ents, err = nl.ReadDirNoFollow(p)
				}
				switch {
				case err == nil:
					r.learnDir(name, p)
					r.remember(p, ents, targets)
					return ents, p, nil
				case hops == 0 && errors.Is(err, fs.ErrNotExist) && !errors.Is(err, linkpath.ErrLinkInPath):
					e := &fs.PathError{Op: "readdir", Path: name, Err: fserr.Cause(err)}
					r.gone[name] = e
					return nil, "", e
				}
				// Otherwise resolve it step by step below, for the
				// exact error: a dangling link is damage, not
				// absence, and a link leaving the root is named.
			}
		}
	}
	p, err := r.Resolve(name)
	if err != nil {
		return nil, "", err
	}
	ents, err := r.listDir(p)
	if err != nil {
		return nil, "", &fs.PathError{Op: "readdir", Path: name, Err: fserr.Cause(err)}
	}
	return ents, p, nil
}

// linksRead reports whether the target of every link of the listing of p
// is known.
func (r *Reader) linksRead(p string, ents []fs.DirEntry) bool {
	for _, e := range ents {
		if e.Type() == fs.ModeSymlink {
			if _, ok := r.link[join(p, e.Name())]; !ok {
				return false
			}
		}
	}
	return true
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// guess returns where name is, as far as the Reader knows without asking:
// the longest prefix it has resolved is replaced by its resolved form, a
// link whose target it has read is followed (lexically: the target is
// joined to the link's directory), and every other component is taken to
// be a directory. hops counts the links followed. ok is false when the
// guess cannot be made: a component is a link whose target is not known,
// climbs after a name, or leaves the root.
func (r *Reader) guess(name string) (p string, hops int, ok bool) {
	if p, ok := r.real[name]; ok {
		return p, 0, true
	}
	cur, rest := ".", name
	for i := len(name); i > 0; {
		j := strings.LastIndexByte(name[:i], '/')
		if j < 0 {
			break
		}
		if rp, ok := r.real[name[:j]]; ok {
			cur, rest = rp, name[j+1:]
			break
		}
		i = j
	}
	for c := range strings.SplitSeq(rest, "/") {
		p := join(cur, c)
		if r.kind[p] == fs.ModeSymlink {
			t, ok := r.link[p]
			if !ok || path.IsAbs(t) || linkpath.ClimbsAfterName(t) {
				return "", 0, false
			}
			if hops++; hops > maxLinkHops {
				return "", 0, false
			}
			p = path.Join(path.Dir(p), t)
			if p == ".." || strings.HasPrefix(p, "../") {
				return "", 0, false
			}
		}
		cur = p
	}
	return cur, hops, true
}

// learn records that the directory of p, where the file name was opened
// without following any link, holds no link: name's directory resolves
// to it, and so does every prefix of it to itself.
func (r *Reader) learn(name, p string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return
	}
	r.learnDir(name[:i], path.Dir(p))
}

// learnDir records that the directory p, listed or opened in without
// following any link, is where name resolves, and that p holds no link.
func (r *Reader) learnDir(name, p string) {
	if _, ok := r.real[name]; ok {
		return
	}
	r.real[name] = p
	for d := p; d != "." && d != ""; d = path.Dir(d) {
		if _, ok := r.real[d]; ok && d != p {
			break
		}
		r.real[d] = d
		r.kind[d] = fs.ModeDir
	}
}

// listDir lists the resolved directory p once, remembering the type of
// every entry.
func (r *Reader) listDir(p string) ([]fs.DirEntry, error) {
	if ents, ok := r.dirs[p]; ok {
		return ents, nil
	}
	ents, err := fs.ReadDir(r.fsys, p)
	if err != nil {
		return nil, err
	}
	r.remember(p, ents, nil)
	return ents, nil
}

// remember keeps the listing of the resolved directory p, the type of
// each entry, and the link targets read with it.
func (r *Reader) remember(p string, ents []fs.DirEntry, targets map[string]string) {
	prefix := p + "/"
	if p == "." {
		prefix = ""
	}
	for _, e := range ents {
		r.kind[prefix+e.Name()] = e.Type() & (fs.ModeSymlink | fs.ModeDir)
	}
	for n, t := range targets {
		r.link[prefix+n] = t
	}
	r.dirs[p] = ents
}

// noFollowOpener opens a path only when none of its components is a
// symbolic link, failing with linkpath.ErrLinkInPath otherwise. With it, reading a
// file in a resolved directory costs one open, not a lstat and an open.
type noFollowOpener interface {
	OpenNoFollow(name string) (fs.File, error)
}

// pageSize is what one read asks for: a sysfs attribute is at most a
// page, so a read that returns less has reached the end of the file.
const pageSize = 4096

// ReadFile returns the contents of name, resolved inside the root, failing
// with sysfs.ErrTooLarge past sysfs.MaxFileSize bytes.
func (r *Reader) ReadFile(name string) ([]byte, error) {
	b, err := r.read(name)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// read returns the contents of name in the Reader's page, valid until the
// next read, or in a buffer of its own when longer. A file shorter than a
// page costs one read(2): a short read from a regular file is its end.
func (r *Reader) read(name string) ([]byte, error) {
	f, err := r.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if r.buf == nil {
		r.buf = make([]byte, pageSize)
	}
	n, err := f.Read(r.buf)
	if err != nil && err != io.EOF {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fserr.Cause(err)}
	}
	if n < len(r.buf) {
		return r.buf[:n], nil
	}
	rest, err := io.ReadAll(io.LimitReader(f, sysfs.MaxFileSize+1-int64(n)))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fserr.Cause(err)}
	}
	b := append(bytes.Clone(r.buf[:n]), rest...)
	if len(b) > sysfs.MaxFileSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: sysfs.ErrTooLarge}
	}
	return b, nil
}

func (r *Reader) open(name string) (fs.File, error) {
	if err, ok := r.gone[name]; ok {
		return nil, err
	}
	// Where the root can refuse links on the way, open the file where
	// the Reader expects it without resolving each component first:
	// success proves there was no link to resolve, and one open(2) reads
	// a file in a directory never seen before.
	if nf, ok := r.fsys.(noFollowOpener); ok && fs.ValidPath(name) && name != "." {
		if p, hops, ok := r.guess(name); ok {
			if k, known := r.kind[p]; !known || k == 0 {
				f, err := nf.OpenNoFollow(p)
				switch {
				case err == nil:
					r.learn(name, p)
					return f, nil
				case errors.Is(err, linkpath.ErrLinkInPath):
					if _, ok := r.real[path.Dir(p)]; ok && hops == 0 {
						r.kind[p] = fs.ModeSymlink // the only unknown component
					}
				case hops == 0 && errors.Is(err, fs.ErrNotExist):
					e := &fs.PathError{Op: "read", Path: name, Err: fserr.Cause(err)}
					r.gone[name] = e
					return nil, e
				}
				// Otherwise resolve it step by step below, for the
				// exact error: a dangling link is damage, not
				// absence, and a link leaving the root is named.
			}
		}
	}
	p, err := r.Resolve(name)
	if err != nil {
		return nil, err
	}
	if r.kind[p] == fs.ModeDir {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	f, err := r.fsys.Open(p)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fserr.Cause(err)}
	}
	return f, nil
}

// ReadString returns the contents of name with surrounding white space
// removed, as sysfs attributes end with a newline.
func (r *Reader) ReadString(name string) (string, error) {
	b, err := r.read(name)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// Exists reports whether name resolves to an entry. Errors other than "does
// not exist" (a loop, a link leaving the root) are returned.
func (r *Reader) Exists(name string) (bool, error) {
	_, err := r.Resolve(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink) {
		return false, nil
	}
	return false, err
}
