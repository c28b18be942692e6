package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/sysfs"
)

const (
	p4dCapture = "../../../testdata/sysfs/p4d.24xlarge.sysfs"
	// The real RDMA directories of two of p4d's EFAs.
	ib16 = "devices/pci0000:10/0000:10:1b.0/infiniband/rdmap16s27"
	ib32 = "devices/pci0000:20/0000:20:1b.0/infiniband/rdmap32s27"
)

// p4dEntries are the entries of the p4d capture with files set (added
// where the capture lacks them): path -> content.
func p4dEntries(t *testing.T, set map[string]string) []sysfs.Entry {
	t.Helper()
	root, err := sysfs.OpenCapture(p4dCapture)
	require.NoError(t, err)
	var es []sysfs.Entry
	done := map[string]bool{}
	for _, e := range root.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if v, ok := set[e.Path]; ok {
			e.Data, done[e.Path] = []byte(v), true
		}
		es = append(es, e)
	}
	for p, v := range set {
		if !done[p] {
			es = append(es, sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: []byte(v)})
		}
	}
	return es
}

// writeCaptureFile writes entries as a capture file and returns its path.
func writeCaptureFile(t *testing.T, es []sysfs.Entry) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&buf, nil, es))
	file := filepath.Join(t.TempDir(), "p4d.sysfs")
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))
	return file
}

// tableRows splits a table into rows of cells (tabwriter pads with two
// spaces at least; a cell holds single spaces: "100 Gb/s").
func tableRows(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, regexp.MustCompile(`  +`).Split(strings.TrimSpace(l), -1))
	}
	return rows
}

// rowOf returns the row of the table whose first cells are prefix.
func rowOf(t *testing.T, rows [][]string, prefix ...string) []string {
	t.Helper()
	for _, r := range rows {
		if len(r) >= len(prefix) && slicesEqual(r[:len(prefix)], prefix) {
			return r
		}
	}
	t.Fatalf("no row %v in %v", prefix, rows)
	return nil
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// countersOf is a header -> cell map of one row of the default table.
func countersOf(t *testing.T, rows [][]string, device string) map[string]string {
	t.Helper()
	head, row := rows[0], rowOf(t, rows, device)
	require.Len(t, row, len(head), "%v", row)
	m := map[string]string{}
	for i, h := range head {
		m[h] = row[i]
	}
	return m
}

// TestCountersOnce: the values of a capture whose counters were set, as a
// table (one row per port, human units, "-" for a counter the driver does
// not have), as JSON (exact integers, "lifespan" left out, a counter beyond
// the catalogue kept; it decodes and encodes back to the same text) and as
// --all (every counter, the new one too).
func TestCountersOnce(t *testing.T) {
	t.Parallel()
	port := ib16 + "/ports/1/hw_counters/"
	file := writeCaptureFile(t, p4dEntries(t, map[string]string{
		port + "tx_bytes":         "3758096384\n", // 3.5 GiB
		port + "rx_bytes":         "1536\n",
		port + "tx_pkts":          "2500000\n",
		port + "rx_pkts":          "999\n",
		port + "rdma_read_bytes":  "5242880\n",
		port + "rdma_write_bytes": "1023\n",
		port + "rx_drops":         "7\n",
		// p4d's driver has none of these: added as a newer one would.
		port + "retrans_pkts":                "1000\n",
		port + "unresponsive_remote_events":  "2\n",
		port + "impaired_remote_conn_events": "0\n",
		port + "new_counter":                 "42\n",
		port + "lifespan":                    "12\n",
		ib16 + "/hw_counters/submitted_cmds": "18446744073709551615\n", // the largest value
	}))

	code, out, errOut := runCLI("counters", "--sysfs", file)
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
	rows := tableRows(out)
	assert.Equal(t, []string{"DEVICE", "PCI", "PORT", "STATE", "RATE", "TX", "RX", "TX PKTS", "RX PKTS", "RDMA READ",
		"RDMA WRITE", "RX DROPS", "RETRANS", "UNRESPONSIVE", "IMPAIRED"}, rows[0])
	require.Len(t, rows, 5, out) // a header and p4d's four EFAs, one port each
	assert.Equal(t, map[string]string{
		"DEVICE": "rdmap16s27", "PCI": "0000:10:1b.0", "PORT": "1", "STATE": "ACTIVE", "RATE": "100 Gb/s",
		"TX": "3.5 GiB", "RX": "1.5 KiB", "TX PKTS": "2.5M", "RX PKTS": "999", "RDMA READ": "5.0 MiB",
		"RDMA WRITE": "1023 B", "RX DROPS": "7", "RETRANS": "1.0k", "UNRESPONSIVE": "2", "IMPAIRED": "0",
	}, countersOf(t, rows, "rdmap16s27"))
	other := countersOf(t, rows, "rdmap144s27")
	assert.Equal(t, "0 B", other["TX"])
	assert.Equal(t, "-", other["RETRANS"], "a counter the driver lacks is unknown, not 0")
	assert.NotContains(t, out, "new_counter", "the default table shows its columns only")

	code, out, errOut = runCLI("counters", "--sysfs", file, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var rep countersReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	again, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	assert.Equal(t, out, string(again)+"\n", "JSON round trip")
	require.Len(t, rep.EFAs, 4)
	e := rep.EFAs[0]
	assert.Equal(t, "rdmap16s27", e.Name)
	assert.Equal(t, "0000:10:1b.0", e.PCIAddress)
	assert.Equal(t, uint64(18446744073709551615), e.Counters["submitted_cmds"])
	require.Len(t, e.Ports, 1)
	p := e.Ports[0]
	assert.Equal(t, 1, p.Port)
	assert.Equal(t, "ACTIVE", p.State)
	assert.Equal(t, 100.0, p.RateGbps)
	assert.Equal(t, uint64(3758096384), p.Counters["tx_bytes"])
	assert.Equal(t, uint64(42), p.Counters["new_counter"])
	assert.NotContains(t, p.Counters, "lifespan")
	assert.NotContains(t, rep.EFAs[1].Ports[0].Counters, "retrans_pkts")
	assert.Nil(t, p.Deltas)
	assert.Nil(t, rep.ElapsedSeconds)
	_, err = time.Parse(time.RFC3339Nano, rep.Time)
	assert.NoError(t, err)

	code, out, errOut = runCLI("counters", "--sysfs", file, "--all")
	require.Equal(t, 0, code, errOut)
	rows = tableRows(out)
	assert.Equal(t, []string{"DEVICE", "PCI", "PORT", "COUNTER", "VALUE"}, rows[0])
	assert.Equal(t, []string{"rdmap16s27", "0000:10:1b.0", "1", "new_counter", "42"}, rowOf(t, rows, "rdmap16s27", "0000:10:1b.0", "1", "new_counter"))
	assert.Equal(t, []string{"rdmap16s27", "0000:10:1b.0", "-", "submitted_cmds", "18.4E"}, rowOf(t, rows, "rdmap16s27", "0000:10:1b.0", "-", "submitted_cmds"))
	assert.Equal(t, []string{"rdmap32s27", "0000:20:1b.0", "1", "retrans_pkts", "-"}, rowOf(t, rows, "rdmap32s27", "0000:20:1b.0", "1", "retrans_pkts"))
	assert.NotContains(t, out, "lifespan")
	// Per EFA: 12 device counters and 22 port counters of the catalogue;
	// rdmap16s27 has one more.
	assert.Len(t, rows, 1+4*(12+22)+1)
}

// TestCountersBroken: a counter file that cannot be read (write-only) or
// parsed is "-" and absent in JSON, with one stderr line naming the device
// and the file; the other counters and EFAs are shown and the exit code is
// 0. When no counter at all can be read, the exit code is 1.
func TestCountersBroken(t *testing.T) {
	t.Parallel()
	es := p4dEntries(t, map[string]string{ib16 + "/ports/1/hw_counters/rx_pkts": "12abc\n"})
	for i, e := range es {
		if e.Path == ib32+"/ports/1/hw_counters/tx_bytes" {
			es[i].Mode = 0o200
		}
	}
	file := writeCaptureFile(t, es)
	code, out, errOut := runCLI("counters", "--sysfs", file)
	assert.Equal(t, 0, code)
	rows := tableRows(out)
	require.Len(t, rows, 5, out)
	assert.Equal(t, "-", countersOf(t, rows, "rdmap32s27")["TX"])
	assert.Equal(t, "0 B", countersOf(t, rows, "rdmap32s27")["RX"])
	assert.Equal(t, "-", countersOf(t, rows, "rdmap16s27")["RX PKTS"])
	assert.Equal(t, "0", countersOf(t, rows, "rdmap16s27")["TX PKTS"])
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Len(t, lines, 2, errOut)
	assert.Contains(t, errOut, "efakit counters: efa rdmap32s27: "+ib32+"/ports/1/hw_counters/tx_bytes: ")
	assert.Contains(t, errOut, "efakit counters: efa rdmap16s27: "+ib16+"/ports/1/hw_counters/rx_pkts: ")

	code, out, _ = runCLI("counters", "--sysfs", file, "-o", "json")
	assert.Equal(t, 0, code)
	var rep countersReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.NotContains(t, rep.EFAs[1].Ports[0].Counters, "tx_bytes")
	assert.Contains(t, rep.EFAs[1].Ports[0].Counters, "rx_bytes")

	for i, e := range es {
		if strings.Contains(e.Path, "/hw_counters/") {
			es[i].Mode = 0o200
		}
	}
	code, out, errOut = runCLI("counters", "--sysfs", writeCaptureFile(t, es))
	assert.Equal(t, 1, code, "nothing could be read")
	assert.Equal(t, "-", countersOf(t, tableRows(out), "rdmap160s27")["TX"])
	assert.Contains(t, errOut, "efa rdmap160s27: devices/pci0000:a0/0000:a0:1b.0/infiniband/rdmap160s27/hw_counters/submitted_cmds: ")
}

// TestCountersDevice: --device takes RDMA names and PCI addresses, keeps
// discovery order, and refuses a name that is no EFA before printing.
func TestCountersDevice(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("counters", "--sysfs", p4dCapture, "--device", "rdmap160s27", "--device", "0000:20:1b.0", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var rep countersReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	var names []string
	for _, e := range rep.EFAs {
		names = append(names, e.Name)
	}
	assert.Equal(t, []string{"rdmap32s27", "rdmap160s27"}, names)

	code, out, errOut = runCLI("counters", "--sysfs", p4dCapture, "--device", "rdmap16s27", "--device", "rdmap99s0")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, `efakit counters: --device "rdmap99s0": no such EFA (found: rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27)`)
}

// TestCountersUsage: flags that make no sense together are usage errors,
// exit 2, before anything is read.
func TestCountersUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--count", "3"}, "--count needs --interval"},
		{[]string{"--interval", "-1s"}, "--interval -1s is negative"},
		{[]string{"--interval", "1s", "--count", "-1"}, "--count -1 is negative"},
		{[]string{"-o", "yaml"}, `unknown output format "yaml" (table, json)`},
		{[]string{"--interval", "soon"}, `invalid value "soon" for flag -interval`},
	} {
		code, out, errOut := runCLI(append([]string{"counters", "--sysfs", "/nonexistent"}, tc.args...)...)
		assert.Equal(t, 2, code, tc.args)
		assert.Empty(t, out, tc.args)
		assert.Contains(t, errOut, tc.msg, tc.args)
	}
	code, out, _ := runCLI("counters", "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"-sysfs ", "-device ", "-interval ", "-count ", "-o ", "-all\n"} {
		assert.Contains(t, out, "\n  "+f, "counters --help shows %s", f)
	}
}

// liveFS is a sysfs tree whose files change between reads: files holds
// what a path reads now, over the tree's own content.
type liveFS struct {
	fs.ReadLinkFS
	mu    sync.Mutex
	files map[string]string
}

func (l *liveFS) Open(name string) (fs.File, error) {
	l.mu.Lock()
	v, ok := l.files[name]
	l.mu.Unlock()
	if ok {
		return fstest.MapFS{name: {Data: []byte(v)}}.Open(name)
	}
	return l.ReadLinkFS.Open(name)
}

func (l *liveFS) set(m map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range m {
		l.files[k] = v
	}
}

// fakeWorld runs counters on p4d with values that change at each sleep:
// steps[i] is set when the i-th sleep ends, which lasts what was asked
// plus over (the time a real sleep and the reads take beyond it).
type fakeWorld struct {
	fs     *liveFS
	now    time.Time
	over   time.Duration
	steps  []map[string]string
	slept  []time.Duration
	cancel func() // called at the sleep after the last step, if set
}

func newFakeWorld(t *testing.T, initial map[string]string, steps ...map[string]string) *fakeWorld {
	t.Helper()
	m, err := sysfs.NewMemFS(p4dEntries(t, nil))
	require.NoError(t, err)
	w := &fakeWorld{fs: &liveFS{ReadLinkFS: m, files: map[string]string{}}, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), steps: steps}
	w.fs.set(initial)
	return w
}

func (w *fakeWorld) env() countersEnv {
	return countersEnv{
		open: func(string) (*sysfs.Root, error) { return &sysfs.Root{ReadLinkFS: w.fs, Source: "fake"}, nil },
		now:  func() time.Time { return w.now },
		sleep: func(ctx context.Context, d time.Duration) error {
			w.slept = append(w.slept, d)
			n := len(w.slept)
			if n > len(w.steps) {
				if w.cancel != nil {
					w.cancel()
				}
				return ctx.Err()
			}
			w.now = w.now.Add(d + w.over)
			w.fs.set(w.steps[n-1])
			return nil
		},
	}
}

func (w *fakeWorld) run(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var o, e bytes.Buffer
	opts, code, ok := parseCountersFlags(append([]string{"--sysfs", "fake"}, args...), &o, &e)
	require.True(t, ok, "%d %s", code, e.String())
	code = runCounters(ctx, w.env(), opts, &o, &e)
	return code, o.String(), e.String()
}

// TestCountersRates: with --interval, each table is the rates per second
// over the interval: an exact delta over an exact time, in bits per second
// for bytes; a counter that went down is "reset"; port state is read
// again at each interval; --count ends it.
func TestCountersRates(t *testing.T) {
	t.Parallel()
	port := ib16 + "/ports/1/hw_counters/"
	w := newFakeWorld(t,
		map[string]string{port + "tx_bytes": "1000\n", port + "rx_bytes": "5000\n", port + "tx_pkts": "10\n", port + "rx_drops": "4\n"},
		// 2.5e9 bytes in 2 s: 1.25e9 B/s, 10 Gb/s; 2e6 packets: 1M/s; 3 drops: 1.5/s.
		map[string]string{port + "tx_bytes": "2500001000\n", port + "tx_pkts": "2000010\n", port + "rx_drops": "7\n"},
		// 250 bytes in 2 s: 1000 b/s; rx_bytes went down; the link went down.
		map[string]string{port + "tx_bytes": "2500001250\n", port + "rx_bytes": "100\n", ib16 + "/ports/1/state": "1: DOWN\n"},
	)
	code, out, errOut := w.run(t, context.Background(), "--interval", "2s", "--count", "2")
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, errOut)
	assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second}, w.slept)
	first, second, ok := strings.Cut(out, "\n\n")
	require.True(t, ok, out)
	assert.True(t, strings.HasPrefix(first, "12:00:02: per second over 2.000 s\n"), first)
	assert.True(t, strings.HasPrefix(second, "12:00:04: per second over 2.000 s\n"), second)

	rows := tableRows(strings.SplitN(first, "\n", 2)[1])
	c := countersOf(t, rows, "rdmap16s27")
	assert.Equal(t, "10.0 Gb/s", c["TX"])
	assert.Equal(t, "0 b/s", c["RX"])
	assert.Equal(t, "1.0M/s", c["TX PKTS"])
	assert.Equal(t, "1.5/s", c["RX DROPS"])
	assert.Equal(t, "ACTIVE", c["STATE"])
	assert.Equal(t, "-", c["RETRANS"])
	assert.Equal(t, "0 b/s", countersOf(t, rows, "rdmap32s27")["TX"])

	rows = tableRows(strings.SplitN(second, "\n", 2)[1])
	c = countersOf(t, rows, "rdmap16s27")
	assert.Equal(t, "1.0 kb/s", c["TX"])
	assert.Equal(t, "reset", c["RX"])
	assert.Equal(t, "0/s", c["TX PKTS"])
	assert.Equal(t, "DOWN", c["STATE"])
}

// TestCountersRatesJSON: one JSON object a line per interval, with the
// exact deltas and seconds; a reset counter is listed and has no delta.
// Reads are due every interval from the first, so a late wake-up shortens
// the next sleep.
func TestCountersRatesJSON(t *testing.T) {
	t.Parallel()
	port := ib16 + "/ports/1/hw_counters/"
	w := newFakeWorld(t,
		map[string]string{port + "tx_bytes": "1000\n", port + "rx_bytes": "5000\n"},
		map[string]string{port + "tx_bytes": "18446744073709551615\n"},
		map[string]string{port + "rx_bytes": "4999\n"},
	)
	w.over = 250 * time.Millisecond
	code, out, errOut := w.run(t, context.Background(), "--interval", "2s", "--count", "2", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, []time.Duration{2 * time.Second, 1750 * time.Millisecond}, w.slept)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	var reps []countersReport
	for _, l := range lines {
		var rep countersReport
		require.NoError(t, json.Unmarshal([]byte(l), &rep), l)
		again, err := json.Marshal(rep)
		require.NoError(t, err)
		assert.Equal(t, l, string(again), "JSON round trip")
		reps = append(reps, rep)
	}
	require.NotNil(t, reps[0].ElapsedSeconds)
	assert.Equal(t, 2.25, *reps[0].ElapsedSeconds)
	assert.Equal(t, "2026-03-01T12:00:02.25Z", reps[0].Time)
	p := reps[0].EFAs[0].Ports[0]
	assert.Equal(t, uint64(18446744073709551615-1000), p.Deltas["tx_bytes"])
	assert.Equal(t, uint64(0), p.Deltas["rx_bytes"])
	assert.Nil(t, p.Counters)
	assert.Equal(t, uint64(0), reps[0].EFAs[0].Deltas["submitted_cmds"])

	assert.Equal(t, 2.0, *reps[1].ElapsedSeconds)
	p = reps[1].EFAs[0].Ports[0]
	assert.Equal(t, []string{"rx_bytes"}, p.Reset)
	assert.NotContains(t, p.Deltas, "rx_bytes")
	assert.Equal(t, uint64(0), p.Deltas["tx_bytes"])
}

// TestCountersInterrupted: without --count it goes on until interrupted,
// then stops between reads with exit code 0; a file that breaks is
// reported once, however many intervals it stays broken.
func TestCountersInterrupted(t *testing.T) {
	t.Parallel()
	port := ib16 + "/ports/1/hw_counters/"
	broken := map[string]string{port + "tx_bytes": "oops\n"}
	w := newFakeWorld(t, nil, broken, broken, broken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.cancel = cancel
	code, out, errOut := w.run(t, ctx, "--interval", "1s")
	assert.Equal(t, 0, code)
	assert.Len(t, w.slept, 4)
	assert.Equal(t, 3, strings.Count(out, "per second over 1.000 s"), out)
	assert.Equal(t, "efakit counters: efa rdmap16s27: "+port+`tx_bytes: "oops" is not a counter value`+"\n", errOut)
	assert.Equal(t, "-", countersOf(t, tableRows(strings.SplitN(out, "\n", 2)[1]), "rdmap16s27")["TX"])
}

// TestCounterUnits: the table's units, at their boundaries: a value that
// would print as 1024.0 of a unit prints as 1.0 of the next.
func TestCounterUnits(t *testing.T) {
	t.Parallel()
	for v, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1048524: "1023.9 KiB", 1048535: "1.0 MiB",
		1 << 30: "1.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		assert.Equal(t, want, humanBytes(v), v)
	}
	for v, want := range map[uint64]string{
		0: "0", 999: "999", 1000: "1.0k", 999949: "999.9k", 999950: "1.0M", 2500000: "2.5M", 1<<64 - 1: "18.4E",
	} {
		assert.Equal(t, want, humanCount(v), v)
	}
	cw := &counterWriter{units: counterUnits()}
	for _, tc := range []struct {
		name  string
		delta uint64
		secs  float64
		want  string
	}{
		{"tx_bytes", 124, 1, "992 b/s"},
		{"tx_bytes", 125, 1, "1.0 kb/s"},
		{"tx_bytes", 124_990_000, 1, "999.9 Mb/s"},
		{"tx_bytes", 124_999_999, 1, "1.0 Gb/s"},
		{"tx_bytes", 50_000_000_000, 1, "400.0 Gb/s"},
		{"tx_pkts", 1, 4, "0.2/s"},
		{"tx_pkts", 3, 2, "1.5/s"},
		{"rx_drops", 1500, 1, "1.5k/s"},
		{"future_counter", 10, 1, "10/s"},
	} {
		got := cw.cell(counterSet{Deltas: map[string]uint64{tc.name: tc.delta}}, tc.name, tc.secs)
		assert.Equal(t, tc.want, got, "%+v", tc)
	}
}
