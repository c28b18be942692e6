package efa_test

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fakesys"
	namecheck "github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// renamed returns the p4d.24xlarge capture with every occurrence of old in
// a path, a link target or a file's content replaced by new: a device the
// kernel (or a hostile capture) named new.
func renamed(t *testing.T, old, new string) []sysfs.Entry {
	t.Helper()
	root := open(t, "../testdata/sysfs/p4d.24xlarge.sysfs")
	out, n := fakesys.Renamed(root.ReadLinkFS.(*sysfs.MemFS).Entries(), old, new)
	require.NotZero(t, n, "%s is not in the capture", old)
	return out
}

// TestBadNamesLeftOut: an RDMA device, uverbs device or ENA interface whose
// name holds a control character (newline, tab, DEL, C1) or invalid UTF-8
// is reported, the name quoted so that the error is one line, and left
// out: it is in no EFA, no topology device and no published attribute. Read
// from memory and from disk (through openat2), where such names are legal.
func TestBadNamesLeftOut(t *testing.T) {
	t.Parallel()
	const (
		rdma  = "rdmap16s27"
		fn    = "0000:10:1b.0"
		ena   = "ens32"
		enaFn = "0000:10:01.0"
	)
	all := []string{"rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"}
	for _, tc := range []struct {
		name     string
		old, new string
		who      string   // the device the error names
		efas     []string // the EFAs found
		check    func(t *testing.T, m map[string]*efa.Device)
	}{
		{"RDMA name with a newline forging a row", rdma, rdma + "\nrdmap99s0  0000:99:00.0", "efa " + fn, all[1:], nil},
		{"RDMA name with invalid UTF-8", rdma, rdma + "\xff", "efa " + fn, all[1:], nil},
		{"RDMA name with a tab", rdma, "rdmap16\ts27", "efa " + fn, all[1:], nil},
		{"RDMA name with DEL", rdma, rdma + "\x7f", "efa " + fn, all[1:], nil},
		{"RDMA name with C1 NEL", rdma, rdma + "\u0085x", "efa " + fn, all[1:], nil},
		{"uverbs name with a newline", "uverbs0", "uverbs0\nuverbs9", "efa " + rdma, all, func(t *testing.T, m map[string]*efa.Device) {
			assert.Nil(t, m[rdma].Verbs, "no uverbs device: not published")
		}},
		{"ENA name with a newline", ena, "ens\n32", "efa " + enaFn, all, func(t *testing.T, m map[string]*efa.Device) {
			assert.Empty(t, m[rdma].Netdev, "its ENA is left out")
			assert.Equal(t, "enp32s1", m["rdmap32s27"].Netdev, "the others still pair")
		}},
		{"ENA name with invalid UTF-8", ena, "ens32\xc3", "efa " + enaFn, all, func(t *testing.T, m map[string]*efa.Device) {
			assert.Empty(t, m[rdma].Netdev)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entries := renamed(t, tc.old, tc.new)
			roots := map[string]fs.ReadLinkFS{}
			// io/fs paths are UTF-8: a MemFS cannot hold the invalid
			// ones, a directory can.
			if utf8.ValidString(tc.new) {
				mem, err := sysfs.NewMemFS(entries)
				require.NoError(t, err)
				roots["memory"] = mem
			}
			dir := filepath.Join(t.TempDir(), "sys")
			require.NoError(t, fakesys.WriteTree(dir, entries))
			disk, err := sysfs.Open(dir)
			require.NoError(t, err)
			defer disk.Close()
			roots["disk"] = disk
			for where, fsys := range roots {
				topo, res, err := scanAll(t, fsys)
				require.Error(t, err, where)
				msg := err.Error()
				assert.Contains(t, msg, tc.who+": ", where)
				assert.Contains(t, msg, strconv.Quote(tc.new), "%s: the name quoted", where)
				assert.NotContains(t, msg, tc.new, "%s: never raw", where)
				assert.ErrorIs(t, err, pcie.ErrBadName, where)
				assert.Len(t, strings.Split(msg, "\n"), 1, "%s: one error, one line: %s", where, msg)
				assert.Equal(t, tc.efas, names(res.EFAs), where)
				m := byName(res.EFAs)
				if tc.check != nil {
					tc.check(t, m)
				}
				for _, d := range topo.Devices {
					assert.NoError(t, namecheck.CheckName(d.Name), where)
				}
				// driver/resources' TestBadNamesNeverPublished: nor in what
				// the plugin publishes.
				// What the plugin reads when it prepares a claim.
				addr, err := pcie.ParseAddress(fn)
				require.NoError(t, err)
				cur, err := efa.ReadCurrent(sysread.New(fsys), addr)
				if tc.old == rdma {
					assert.ErrorIs(t, err, pcie.ErrBadName, where)
					assert.Empty(t, cur.RDMAName, where)
				} else if tc.old == "uverbs0" {
					assert.ErrorIs(t, err, pcie.ErrBadName, where)
					assert.Empty(t, cur.Verbs.Name, where)
				}
			}
		})
	}
}

// scanAll scans fsys as efakit list and the plugin do: the EFAs, and the
// topology with the host and Neuron readers too.
func scanAll(t *testing.T, fsys fs.ReadLinkFS) (*topology.Topology, *efa.Result, error) {
	t.Helper()
	_, res, err := efa.Scan(fsys)
	topo, terr := topology.Scan(fsys)
	require.Equal(t, err != nil, terr != nil)
	return topo, res, err
}

// TestDamagedCounterStaysUnknown: a counter whose value does not parse, or
// whose name cannot be printed, is not in the map (unknown, not 0), with an
// error naming the device and the file; the other counters are read.
func TestDamagedCounterStaysUnknown(t *testing.T) {
	t.Parallel()
	ib := damaged + "/infiniband/rdmap72s0"
	for _, tc := range []struct {
		name, file, value string
		port              bool   // a port counter, not the device's
		counter           string // left out
		errFile           string // the error names it
	}{
		{"device counter", ib + "/hw_counters/cmds_err", "-1", false, "cmds_err", ib + "/hw_counters/cmds_err"},
		{"port counter", ib + "/ports/1/hw_counters/rx_bytes", "0x10", true, "rx_bytes", ib + "/ports/1/hw_counters/rx_bytes"},
		{"counter name with a newline", ib + "/ports/1/hw_counters/rx_bytes\ntx_bytes", "7", true, "rx_bytes\ntx_bytes", ib + "/ports/1/hw_counters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clean, b := smallSwitch(), smallSwitch()
			b.Attr(tc.file, tc.value)
			_, res, err := efa.Scan(b.FS())
			require.NoError(t, err, "counters are not read by discovery")
			want, err := res.EFAs[1].ReadCounters(clean.FS())
			require.NoError(t, err)
			got, err := res.EFAs[1].ReadCounters(b.FS())
			require.Error(t, err)
			assert.Contains(t, err.Error(), "efa rdmap72s0: "+tc.errFile+": ")
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, err.Error())
			m, wm := got.Device, want.Device
			if tc.port {
				m, wm = got.Ports[1], want.Ports[1]
			}
			assert.NotContains(t, m, tc.counter, "unknown, not 0")
			delete(wm, tc.counter)
			assert.Equal(t, wm, m, "the other counters are read")
		})
	}
}
