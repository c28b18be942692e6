package snapshot_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/efakit/efakit/internal/fixturegen/seeds"
	"github.com/efakit/efakit/snapshot"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// FuzzTake snapshots whole captures as if they were a live /sys:
// ParseCapture, NewMemFS, Take. Whatever the capture holds, the snapshot
// writes as a capture and parses back to the same entries; a snapshot
// taken without scrubbing and without an error, snapshotted again, is the
// same snapshot; and
// where the capture reads without an error, its snapshot gives the same
// devices, links and pairings.
func FuzzTake(f *testing.F) {
	caps, err := seeds.Captures()
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		f.Add(caps[name])
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
		raw, rawErr := snapshot.Take(m, snapshot.Options{NoScrub: true})
		if raw == nil {
			if rawErr == nil {
				t.Fatal("no snapshot and no error")
			}
			return
		}
		rawFS := parseBack(t, raw.Entries)
		again, err := snapshot.Take(rawFS, snapshot.Options{NoScrub: true})
		if rawErr == nil {
			if err != nil {
				t.Fatalf("snapshot of the snapshot: %v", err)
			}
			if d := diffEntries(raw.Entries, again.Entries); d != "" {
				t.Fatalf("snapshot of the snapshot differs: %s", d)
			}
		}

		snap, snapErr := snapshot.Take(m, snapshot.Options{})
		if snap == nil {
			t.Fatalf("no scrubbed snapshot where the raw one was taken: %v", snapErr)
		}
		snapFS := parseBack(t, snap.Entries)
		want, scanErr := topology.Scan(m)
		if scanErr != nil || snapErr != nil {
			return
		}
		got, err := topology.Scan(snapFS)
		if err != nil {
			t.Fatalf("the capture reads, its snapshot does not: %v", err)
		}
		w, g := strings.Split(describe(want), "\n"), strings.Split(describe(got), "\n")
		for i := range max(len(w), len(g)) {
			if i >= len(w) || i >= len(g) || w[i] != g[i] {
				t.Fatalf("the snapshot reads differently from line %d:\ncapture:  %s\nsnapshot: %s", i+1, strings.Join(w[min(i, len(w)):], "\n          "), strings.Join(g[min(i, len(g)):], "\n          "))
			}
		}
	})
}

// parseBack writes entries as a capture and reads it back, failing the
// test unless that gives the same entries.
func parseBack(t *testing.T, entries []sysfs.Entry) *sysfs.MemFS {
	t.Helper()
	var buf bytes.Buffer
	if err := sysfs.WriteCapture(&buf, nil, entries); err != nil {
		t.Fatalf("write the snapshot: %v", err)
	}
	back, err := sysfs.ParseCapture(&buf)
	if err != nil {
		t.Fatalf("parse the snapshot back: %v", err)
	}
	if d := diffEntries(entries, back); d != "" {
		t.Fatalf("the snapshot parses back differently: %s", d)
	}
	m, err := sysfs.NewMemFS(back)
	if err != nil {
		t.Fatalf("the snapshot as a tree: %v", err)
	}
	return m
}

// diffEntries returns the first difference between two sorted entry
// lists, "" for none.
func diffEntries(a, b []sysfs.Entry) string {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x.Path != y.Path || x.Kind != y.Kind || !bytes.Equal(x.Data, y.Data) || x.Target != y.Target || x.Mode.Perm() != y.Mode.Perm() {
			return fmt.Sprintf("entry %d: %c %q %q %q %v, then %c %q %q %q %v", i, x.Kind, x.Path, x.Data, x.Target, x.Mode, y.Kind, y.Path, y.Data, y.Target, y.Mode)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d entries, then %d", len(a), len(b))
	}
	return ""
}

// describe is what a topology says of each device, its links and the
// EFAs' uverbs devices and ENA pairings, one device a line.
func describe(t *topology.Topology) string {
	var b strings.Builder
	for _, d := range t.Devices {
		fmt.Fprintf(&b, "%s %s", d.Kind, d.Name)
		if d.PCI != nil {
			fmt.Fprintf(&b, " %s %s numa %d", d.PCI.Address, d.PCI.Root, d.PCI.NUMANode)
		}
		if d.EFA != nil {
			fmt.Fprintf(&b, " netdev %q ports %d", d.EFA.Netdev, len(d.EFA.Ports))
			if d.EFA.Verbs != nil {
				fmt.Fprintf(&b, " %s %d:%d", d.EFA.Verbs.Name, d.EFA.Verbs.Major, d.EFA.Verbs.Minor)
			}
		}
		b.WriteString(" closest")
		for _, o := range t.Closest(d) {
			fmt.Fprintf(&b, " %s", o.Name)
		}
		for _, o := range t.Devices {
			fmt.Fprintf(&b, " %s", t.Link(d, o))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "inactive %d\n", len(t.InactiveEFAs))
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "note %s\n", n)
	}
	return b.String()
}
