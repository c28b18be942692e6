package snapshot_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/snapshot"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

type view struct {
	Name, PCI, Root, Uverbs, Netdev, Driver string
	NUMA                                    int
	Bridges                                 int
	Link, MaxLink                           string
	IOMMU                                   int
	DriverVersion                           string
}

func scan(t *testing.T, fsys fs.ReadLinkFS) ([]view, int) {
	t.Helper()
	tree, res, err := efa.Scan(fsys)
	require.NoError(t, err)
	var out []view
	version, err := efa.ReadDriverVersion(sysread.New(fsys))
	require.NoError(t, err)
	for _, d := range res.EFAs {
		out = append(out, view{d.Name, d.PCI.Address.String(), d.PCI.Root, d.Verbs.Name, d.Netdev, d.PCI.Driver, d.PCI.NUMANode, len(d.PCI.Bridges()),
			linkText(d.PCI.CurrentLink), linkText(d.PCI.MaxLink), d.PCI.IOMMUGroup, version})
	}
	return out, len(tree.Devices)
}

func linkText(l *pcie.LinkRate) string {
	if l == nil {
		return "none"
	}
	return l.String()
}

// TestSnapshotReplays captures every fixture as if it were a live /sys and
// checks that the capture gives the same discovery, with the host's
// identifiers gone, and that capturing a capture changes nothing.
func TestSnapshotReplays(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(p)
			require.NoError(t, err)
			want, wantPCI := scan(t, root)

			snap, err := snapshot.Take(root, snapshot.Options{})
			require.NoError(t, err)
			m, err := sysfs.NewMemFS(snap.Entries)
			require.NoError(t, err)
			got, gotPCI := scan(t, m)
			assert.Equal(t, want, got)
			assert.Equal(t, wantPCI, gotPCI)

			var text bytes.Buffer
			require.NoError(t, sysfs.WriteCapture(&text, nil, snap.Entries))
			orig := root.ReadLinkFS.(*sysfs.MemFS)
			for _, e := range orig.Entries() {
				if strings.HasSuffix(e.Path, "/address") && strings.Contains(e.Path, "/net/") {
					mac := strings.TrimSpace(string(e.Data))
					assert.NotContains(t, text.String(), mac, "MAC %s scrubbed", mac)
				}
				if strings.HasSuffix(e.Path, "/node_guid") {
					g := strings.TrimSpace(string(e.Data))
					if strings.Trim(g, "0:") != "" {
						assert.NotContains(t, text.String(), g, "GUID %s scrubbed", g)
					}
				}
			}
			// A snapshot of the snapshot is the same snapshot.
			again, err := snapshot.Take(m, snapshot.Options{})
			require.NoError(t, err)
			var text2 bytes.Buffer
			require.NoError(t, sysfs.WriteCapture(&text2, nil, again.Entries))
			assert.Equal(t, text.String(), text2.String())
			assert.Less(t, text.Len(), 2<<20)
		})
	}
}

const g5 = "../testdata/sysfs/g5.8xlarge.sysfs"

// capture returns the entries of a fixture capture.
func capture(t *testing.T, path string) []sysfs.Entry {
	t.Helper()
	root, err := sysfs.OpenCapture(path)
	require.NoError(t, err)
	return root.ReadLinkFS.(*sysfs.MemFS).Entries()
}

// TestSnapshotLinksStayInside: when a directory on the way to a link is
// itself a link, the link is captured at another place than where it lies,
// and its target, right where it lies, leads out of the capture from
// there. Such a link is left out with an error naming it; the capture
// unpacks with every link inside it.
func TestSnapshotLinksStayInside(t *testing.T) {
	t.Parallel()
	var es []sysfs.Entry
	for _, e := range capture(t, g5) {
		if e.Path == "class/infiniband" || strings.HasPrefix(e.Path, "class/infiniband/") {
			continue
		}
		es = append(es, e)
	}
	es = append(es,
		sysfs.Entry{Path: "class/infiniband", Kind: sysfs.KindLink, Target: "../devices/virtual/a/b/ib"},
		sysfs.Entry{Path: "devices/virtual/a/b/ib/efa_0", Kind: sysfs.KindLink, Target: "../../../../../devices/pci0000:00/0000:00:06.0/infiniband/efa_0"},
	)
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	snap, err := snapshot.Take(m, snapshot.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, sysfs.ErrEscapesRoot)
	assert.ErrorContains(t, err, "class/infiniband/efa_0")
	for _, e := range snap.Entries {
		assert.NotEqual(t, "class/infiniband/efa_0", e.Path, "captured where its target leads out")
	}
	dir := filepath.Join(t.TempDir(), "sys")
	require.NoError(t, sysfs.WriteDir(dir, snap.Entries), "every link of the capture can be unpacked")
	got, _ := scan(t, m)
	assert.Len(t, got, 1, "the EFA itself is still there")
}

// TestSnapshotVirtualRDMA: an RDMA device of no PCI function (soft-RoCE's
// rxe, under devices/virtual) and its uverbs device are captured whole,
// without power/ or uevent, beside the EFAs; the EFAs' discovery is as
// without them. (A real kernel's rxe: test/e2e/rdmakernel.)
func TestSnapshotVirtualRDMA(t *testing.T) {
	t.Parallel()
	base := capture(t, g5)
	rxe := "devices/virtual/infiniband/rxe0"
	verbs := "devices/virtual/infiniband_verbs/uverbs1"
	files := map[string]string{
		rxe + "/node_type":                     "1: CA",
		rxe + "/parent":                        "d0",
		rxe + "/ports/1/state":                 "4: ACTIVE",
		rxe + "/ports/1/rate":                  "2.5 Gb/sec (1X SDR)",
		rxe + "/ports/1/hw_counters/sent_pkts": "200",
		rxe + "/ports/1/hw_counters/lifespan":  "10",
		rxe + "/power/runtime_status":          "unsupported",
		rxe + "/uevent":                        "NAME=rxe0",
		verbs + "/ibdev":                       "rxe0",
		verbs + "/dev":                         "231:193",
	}
	es := append([]sysfs.Entry{}, base...)
	for path, data := range files {
		es = append(es, sysfs.Entry{Path: path, Kind: sysfs.KindFile, Mode: 0o444, Data: []byte(data + "\n")})
	}
	es = append(es,
		sysfs.Entry{Path: "class/infiniband/rxe0", Kind: sysfs.KindLink, Target: "../../" + rxe},
		sysfs.Entry{Path: "class/infiniband_verbs/uverbs1", Kind: sysfs.KindLink, Target: "../../" + verbs})
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	snap, err := snapshot.Take(m, snapshot.Options{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range snap.Entries {
		if (strings.HasPrefix(e.Path, rxe) || strings.HasPrefix(e.Path, verbs)) && e.Kind == sysfs.KindFile {
			got[e.Path] = strings.TrimSpace(string(e.Data))
		}
		if e.Path == "class/infiniband/rxe0" || e.Path == "class/infiniband_verbs/uverbs1" {
			got[e.Path] = e.Target
		}
	}
	want := map[string]string{"class/infiniband/rxe0": "../../" + rxe, "class/infiniband_verbs/uverbs1": "../../" + verbs}
	for path, data := range files {
		if !strings.Contains(path, "/power/") && !strings.HasSuffix(path, "/uevent") {
			want[path] = data
		}
	}
	assert.Equal(t, want, got)

	withRXE, _ := scan(t, m)
	replayed, err := sysfs.NewMemFS(snap.Entries)
	require.NoError(t, err)
	fromCapture, _ := scan(t, replayed)
	without, err := sysfs.NewMemFS(base)
	require.NoError(t, err)
	plain, _ := scan(t, without)
	assert.Equal(t, plain, withRXE, "rxe0 is no EFA")
	assert.Equal(t, len(plain), len(fromCapture))
}

// TestSnapshotBadNames: names that are not UTF-8 or hold a control
// character are left out, each with an error naming its directory, and
// the rest of the capture is as without them.
func TestSnapshotBadNames(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sys")
	require.NoError(t, sysfs.WriteDir(dir, capture(t, g5)))
	clean, err := sysfs.Open(dir)
	require.NoError(t, err)
	defer clean.Close()
	want, err := snapshot.Take(clean, snapshot.Options{})
	require.NoError(t, err)

	ib := "devices/pci0000:00/0000:00:06.0/infiniband/efa_0"
	bad := map[string]string{ // directory: name
		ib:                "bad\xffname",
		ib + "/ports":     "1\n",
		"bus/pci/devices": "0000:00:1f.\xfe",
		"class/net":       "eth\x1b[0m",
	}
	for d, name := range bad {
		p := filepath.Join(dir, filepath.FromSlash(d), name)
		switch d {
		case ib + "/ports":
			require.NoError(t, os.Mkdir(p, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(p, "state"), []byte("4: ACTIVE\n"), 0o444))
		case ib:
			require.NoError(t, os.WriteFile(p, []byte("x\n"), 0o444))
		default:
			require.NoError(t, os.Symlink("../../devices/pci0000:00/0000:00:06.0", p))
		}
	}
	root, err := sysfs.Open(dir)
	require.NoError(t, err)
	defer root.Close()
	got, err := snapshot.Take(root, snapshot.Options{})
	require.Error(t, err)
	for d, name := range bad {
		assert.ErrorContains(t, err, fmt.Sprintf("directory %q: name %q", d, name))
	}
	assert.Equal(t, want.Entries, got.Entries)
	assert.Equal(t, want.Skipped, got.Skipped)
}

// TestSnapshotGPUDirect: a snapshot of each GPUDirect case keeps what the
// judgement reads (IOMMU groups, p2p and gdr, the modules' versions, the
// bridges' config space): the pair judged on the snapshot is the pair
// judged on the case, findings, ACS and all.
func TestSnapshotGPUDirect(t *testing.T) {
	t.Parallel()
	judge := func(t *testing.T, root fs.ReadLinkFS, proc fs.FS) []gpudirect.Pair {
		topo, err := topology.Scan(root)
		require.NoError(t, err)
		r := sysread.New(root)
		pairs, _, err := gpudirect.Judge(r, topo, proc)
		require.NoError(t, err)
		for i := range pairs {
			pairs[i].GPU, pairs[i].EFA = nil, nil // of two topologies
		}
		return pairs
	}
	for _, c := range gdrcases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			root, err := sysfs.Open(filepath.Join("..", "testdata", "gpudirect", c.Name+".sysfs"))
			require.NoError(t, err)
			defer root.Close()
			proc := os.DirFS(filepath.Join("..", "testdata", "gpudirect", c.Name+".proc"))
			snap, err := snapshot.Take(root, snapshot.Options{})
			require.NoError(t, err)
			m, err := sysfs.NewMemFS(snap.Entries)
			require.NoError(t, err)
			want := judge(t, root, proc)
			assert.Equal(t, c.Want, want[0].Status.String())
			assert.Equal(t, want, judge(t, m, proc))
		})
	}
}
