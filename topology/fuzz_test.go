package topology_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/efakit/efakit/internal/fixturegen/seeds"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// seedCaptures are the small v1 captures of internal/fixturegen/seeds, in
// name order.
func seedCaptures(tb testing.TB) []string {
	tb.Helper()
	caps, err := seeds.Captures()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		out = append(out, caps[name])
	}
	return out
}

// FuzzScanCapture runs whole captures through the pipeline: ParseCapture,
// NewMemFS, Scan. Whatever the capture holds, Scan returns a topology, and
// its answers are those their definitions give (checkAnswers: every
// device's links, symmetric and SELF to itself, closest devices, standard
// attributes, lookups by name and address).
func FuzzScanCapture(f *testing.F) {
	for _, c := range seedCaptures(f) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, capture string) {
		es, err := sysfs.ParseCapture(strings.NewReader(capture))
		if err != nil {
			return
		}
		m, err := sysfs.NewMemFS(es)
		if err != nil {
			return
		}
		topo, err := topology.Scan(m)
		if topo == nil {
			t.Fatalf("no topology, error %v", err)
		}
		for _, e := range leaves(err) {
			if strings.TrimSpace(e.Error()) == "" {
				t.Fatal("an empty error")
			}
		}
		if msg := checkAnswers(topo); msg != "" {
			t.Fatal(msg)
		}
	})
}

// TestCaptureMutations damages the seed captures one entry at a time:
// every file Scan reads made garbage, every link it follows made to
// dangle, every entry dropped, every line doubled. Nothing panics; a
// doubled line is a parse error; damage Scan reads is an error that names
// the damaged path or a directory above it (the device); and the answers
// keep their definitions.
func TestCaptureMutations(t *testing.T) {
	t.Parallel()
	for _, capture := range seedCaptures(t) {
		es, err := sysfs.ParseCapture(strings.NewReader(capture))
		if err != nil {
			t.Fatal(err)
		}
		m, err := sysfs.NewMemFS(es)
		if err != nil {
			t.Fatal(err)
		}
		count := testfixture.NewCountFS(m)
		if _, err := topology.Scan(count); err != nil {
			t.Fatalf("seed: %v", err)
		}
		calls := count.Calls()
		read := func(p string) bool { return calls["open "+p]+calls["readlink "+p]+calls["lstat "+p] > 0 }
		for i, e := range es {
			var mutants []struct {
				what    string
				entries []sysfs.Entry
				mustErr bool
			}
			add := func(what string, es []sysfs.Entry, mustErr bool) {
				mutants = append(mutants, struct {
					what    string
					entries []sysfs.Entry
					mustErr bool
				}{what, es, mustErr})
			}
			add("dropped", slices.Delete(slices.Clone(es), i, i+1), false)
			switch e.Kind {
			case sysfs.KindFile:
				bad := slices.Clone(es)
				bad[i].Data = []byte("\xff\x00zz\n")
				add("garbage", bad, read(e.Path))
			case sysfs.KindLink:
				bad := slices.Clone(es)
				bad[i].Target = "nowhere"
				add("dangling", bad, read(e.Path))
			}
			for _, mu := range mutants {
				mm, err := sysfs.NewMemFS(mu.entries)
				if err != nil {
					continue // the tree itself is refused, naming the entry
				}
				topo, err := topology.Scan(mm)
				if mu.mustErr && err == nil {
					t.Errorf("%s %s: no error", mu.what, e.Path)
				}
				if err != nil && !namesPath(err.Error(), e.Path) {
					t.Errorf("%s %s: the error names neither it nor a directory above it: %v", mu.what, e.Path, err)
				}
				if msg := checkAnswers(topo); msg != "" {
					t.Errorf("%s %s: %s", mu.what, e.Path, msg)
				}
			}
		}
		// A line twice is a duplicate path, refused by the parser.
		lines := strings.SplitAfter(capture, "\n")
		for i, l := range lines {
			if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "efakit-sysfs-capture") {
				continue
			}
			doubled := strings.Join(slices.Insert(slices.Clone(lines), i, l), "")
			if _, err := sysfs.ParseCapture(strings.NewReader(doubled)); err == nil {
				t.Errorf("line %d doubled: no error", i+1)
			}
		}
	}
}

// namesPath reports whether msg names p or a directory above it at least
// three components deep (devices/pci0000:44/0000:44:00.0).
func namesPath(msg, p string) bool {
	for q := p; strings.Count(q, "/") >= 2; q = q[:strings.LastIndex(q, "/")] {
		if strings.Contains(msg, q) {
			return true
		}
	}
	return false
}

// leaves are the errors joined into err.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}
