// Package sysfs opens a Linux sysfs tree, live or captured, and reads it
// safely: every symbolic link is resolved inside the root, a link that leaves
// the root, loops or dangles is an error for that entry, and no file is read
// without a size bound.
//
// Every path in this package is relative to the sysfs root and slash
// separated: "bus/pci/devices", never "/sys/bus/pci/devices". The live
// machine is Open("/sys"); a capture file written by Snapshot is Open of that
// file. Both give an fs.ReadLinkFS that the other packages of efakit read
// through a Reader.
package sysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxFileSize bounds every read. sysfs text attributes are at most one page
// (4 KiB); a file larger than this is damage, not data, and is reported with
// ErrTooLarge instead of being cut silently.
const MaxFileSize = 64 << 10

// maxLinkHops is the number of symbolic links followed while resolving one
// path, as the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// Errors a caller can branch on. They are wrapped in a *fs.PathError that
// names the offending entry.
var (
	// ErrEscapesRoot: a symbolic link (or "..") points outside the root.
	ErrEscapesRoot = errors.New("link leaves the sysfs root")
	// ErrLinkLoop: more than 40 links were followed while resolving a path.
	ErrLinkLoop = errors.New("too many levels of symbolic links")
	// ErrDanglingLink: a symbolic link points at nothing. It also matches
	// fs.ErrNotExist.
	ErrDanglingLink = fmt.Errorf("dangling symbolic link: %w", fs.ErrNotExist)
	// ErrTooLarge: a file holds more than MaxFileSize bytes.
	ErrTooLarge = fmt.Errorf("file larger than %d bytes", MaxFileSize)
	// ErrNotRegular: a named pipe, socket or device where sysfs has a
	// regular file or a directory. A directory root refuses to open one
	// (a named pipe would block the reader for ever); so does Open for a
	// capture path.
	ErrNotRegular = errors.New("not a regular file or directory")
)

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
}

// NewReader returns a Reader of fsys.
func NewReader(fsys fs.ReadLinkFS) *Reader {
	if root, ok := fsys.(*Root); ok {
		fsys = root.ReadLinkFS // its optional interfaces, such as noFollowOpener
	}
	return &Reader{
		fsys: fsys,
		kind: make(map[string]fs.FileMode),
		link: make(map[string]string),
		real: make(map[string]string),
		dirs: make(map[string][]fs.DirEntry),
	}
}

// FS returns the file system the Reader reads.
func (r *Reader) FS() fs.ReadLinkFS { return r.fsys }

// Resolve returns the path of name with every symbolic link resolved, all
// inside the root. The result names the entry itself; when name is a link to
// nothing, Resolve fails with ErrDanglingLink.
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
			return "", linkErr(ErrDanglingLink, via)
		}
		return "", err
	}
	if k != fs.ModeSymlink {
		r.real[name] = p
		return p, nil
	}
	*hops++
	if *hops > maxLinkHops {
		return "", linkErr(ErrLinkLoop, p)
	}
	target, err := r.readLink(p)
	if err != nil {
		return "", err
	}
	via = p + " -> " + shown(target)
	if path.IsAbs(target) {
		return "", linkErr(ErrEscapesRoot, via)
	}
	var rp string
	if climbsAfterName(target) {
		rp, err = r.follow(path.Dir(p), target, hops, via)
	} else {
		j := path.Join(path.Dir(p), target)
		if j == ".." || strings.HasPrefix(j, "../") {
			return "", linkErr(ErrEscapesRoot, via)
		}
		rp, err = r.resolve(j, hops, via)
	}
	if err != nil {
		return "", err
	}
	r.real[name] = rp
	return rp, nil
}

// climbsAfterName reports whether target has ".." after a name ("m/.."),
// which the kernel applies after following m if m is a link: joining it
// lexically would give another answer. sysfs's own links never do.
func climbsAfterName(target string) bool {
	named := false
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return true
			}
		default:
			named = true
		}
	}
	return false
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
				return "", linkErr(ErrEscapesRoot, via)
			}
			cur = path.Dir(cur)
		default:
			names = append(names, c)
		}
	}
	return r.resolve(path.Join(append([]string{cur}, names...)...), hops, via)
}

// shown returns s as it is when it is printable UTF-8, quoted otherwise,
// so that an error naming a link target of a damaged tree stays one line.
func shown(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

func linkErr(err error, via string) error {
	if via == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, via)
}

func splitPath(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

// kindOf returns the type of p, whose parent must be resolved already.
func (r *Reader) kindOf(p string) (fs.FileMode, error) {
	if k, ok := r.kind[p]; ok {
		return k, nil
	}
	fi, err := r.fsys.Lstat(p)
	if err != nil {
		return 0, stripPathError(err)
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
		return "", stripPathError(err)
	}
	r.link[p] = t
	return t, nil
}

// Cause returns the cause of a *fs.PathError, for callers whose own error
// names the path already. The cause of a link error names the link and its
// target.
func Cause(err error) error { return stripPathError(err) }

// stripPathError keeps the cause of a *fs.PathError so that the caller can
// wrap it with the path it was asked about.
func stripPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
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
	p, err := r.Resolve(name)
	if err != nil {
		return nil, err
	}
	ents, err := r.listDir(p)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: stripPathError(err)}
	}
	return ents, nil
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
	prefix := p + "/"
	if p == "." {
		prefix = ""
	}
	for _, e := range ents {
		r.kind[prefix+e.Name()] = e.Type() & (fs.ModeSymlink | fs.ModeDir)
	}
	r.dirs[p] = ents
	return ents, nil
}

// errLinkInPath is what a noFollowOpener returns for a path that holds a
// symbolic link anywhere.
var errLinkInPath = errors.New("path holds a symbolic link")

// noFollowOpener opens a path only when none of its components is a
// symbolic link, failing with errLinkInPath otherwise. With it, reading a
// file in a resolved directory costs one open, not a lstat and an open.
type noFollowOpener interface {
	OpenNoFollow(name string) (fs.File, error)
}

// ReadFile returns the contents of name, resolved inside the root, failing
// with ErrTooLarge past MaxFileSize bytes.
func (r *Reader) ReadFile(name string) ([]byte, error) {
	f, err := r.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: stripPathError(err)}
	}
	if len(b) > MaxFileSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: ErrTooLarge}
	}
	return b, nil
}

func (r *Reader) open(name string) (fs.File, error) {
	if nf, ok := r.fsys.(noFollowOpener); ok {
		if p, ok := r.resolvedParent(name); ok {
			if k, known := r.kind[p]; !known || k == 0 {
				f, err := nf.OpenNoFollow(p)
				if err == nil {
					return f, nil
				}
				if !errors.Is(err, errLinkInPath) {
					return nil, &fs.PathError{Op: "read", Path: name, Err: stripPathError(err)}
				}
				r.kind[p] = fs.ModeSymlink // resolve it below
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
		return nil, &fs.PathError{Op: "read", Path: name, Err: stripPathError(err)}
	}
	return f, nil
}

// resolvedParent returns name with its directory resolved, when that
// directory resolves.
func (r *Reader) resolvedParent(name string) (string, bool) {
	if !fs.ValidPath(name) || name == "." {
		return "", false
	}
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, true
	}
	dir, err := r.Resolve(name[:i])
	if err != nil {
		return "", false
	}
	if dir == "." {
		return name[i+1:], true
	}
	return dir + "/" + name[i+1:], true
}

// ReadString returns the contents of name with surrounding white space
// removed, as sysfs attributes end with a newline.
func (r *Reader) ReadString(name string) (string, error) {
	b, err := r.ReadFile(name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Exists reports whether name resolves to an entry. Errors other than "does
// not exist" (a loop, a link leaving the root) are returned.
func (r *Reader) Exists(name string) (bool, error) {
	_, err := r.Resolve(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrDanglingLink) {
		return false, nil
	}
	return false, err
}
