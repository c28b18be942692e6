package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

const countersHelp = `Prints the EFAs' hardware counters (the efa driver's hw_counters): one row
per EFA port with the counters that matter most, bytes in KiB, MiB, GiB and
counts in k, M, G. With --interval it reads them again every interval and
prints rates per second over it: bytes as bits per second (kb/s, Mb/s,
Gb/s, as the port's RATE), packets and events per second; until --count
intervals are printed or an interrupt. -o json prints exact integers: the
values, or with --interval one JSON object a line with each interval's
deltas and its seconds. --all lists every counter, those a newer driver
adds too.

A counter that went down (a driver reload, a wrap) shows as "reset", never
as a rate. "-" is a counter the driver does not have or that could not be
read (absent in JSON); a read error goes to stderr once, naming the device
and the file. Exit code 1 only when no counter could be read.
`

// countersOpts are the flags of efakit counters.
type countersOpts struct {
	root     string
	devices  []string // RDMA names or PCI addresses; empty for every EFA
	interval time.Duration
	count    int
	format   string
	all      bool
}

// countersEnv is what counters takes from the world, so that a test can
// give it a tree whose counters change and a clock that never waits.
type countersEnv struct {
	open  func(string) (*sysfs.Root, error)
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
}

// stringsFlag is a flag that may be given more than once.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func cmdCounters(args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseCountersFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	ctx := context.Background()
	if o.interval > 0 {
		// An interrupt ends the loop between reads, with exit code 0.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	return runCounters(ctx, countersEnv{open: sysfs.Open, now: time.Now, sleep: sleepContext}, o, stdout, stderr)
}

func parseCountersFlags(args []string, stdout, stderr io.Writer) (o countersOpts, code int, ok bool) {
	fl := newFlags("counters")
	fl.StringVar(&o.root, "sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	fl.Var((*stringsFlag)(&o.devices), "device", "only this EFA, by RDMA `name` or PCI address (repeatable)")
	fl.DurationVar(&o.interval, "interval", 0, "print rates per second over each `duration` (1s, 500ms) instead of values")
	fl.IntVar(&o.count, "count", 0, "with --interval, stop after `n` intervals (0: until interrupted)")
	fl.StringVar(&o.format, "o", "table", "output `format`: table or json")
	fl.BoolVar(&o.all, "all", false, "table: one row per counter, every counter the driver has")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return o, code, false
	}
	var msg string
	switch {
	case o.format != "table" && o.format != "json":
		msg = fmt.Sprintf("unknown output format %q (table, json)", o.format)
	case o.interval < 0:
		msg = fmt.Sprintf("--interval %s is negative", o.interval)
	case o.count < 0:
		msg = fmt.Sprintf("--count %d is negative", o.count)
	case o.count > 0 && o.interval == 0:
		msg = "--count needs --interval"
	}
	if msg != "" {
		fmt.Fprintf(stderr, "efakit counters: %s\n", msg)
		return o, 2, false
	}
	return o, 0, true
}

// sleepContext waits d, or less when ctx ends first (its error then).
func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func runCounters(ctx context.Context, env countersEnv, o countersOpts, stdout, stderr io.Writer) int {
	const prefix = "efakit counters"
	root, err := env.open(o.root)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 1
	}
	defer root.Close()
	printNote(stderr, prefix, root)
	// Discovery reads no optional attribute: counters need the RDMA
	// device's directory and its ports, nothing else.
	r := sysread.NewLean(root, sysread.Lean{})
	tree, perr := pcie.Discover(r)
	res, eerr := efa.Discover(r, tree)
	errs := &errorPrinter{w: stderr, prefix: prefix, seen: map[string]bool{}}
	discoverErr := errors.Join(perr, eerr)
	errs.print(discoverErr)
	efas, err := chooseEFAs(res.EFAs, o.devices)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 1
	}
	out := &counterWriter{w: stdout, format: o.format, all: o.all, units: counterUnits()}

	first, read := readSample(root, efas, env.now(), false, errs)
	if len(efas) == 0 {
		if err := out.write(onceReport(efas, first), 0); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return 1
		}
		return exitCode(discoverErr != nil, 0)
	}
	if o.interval == 0 || (read == 0 && errs.n > 0) {
		if err := out.write(onceReport(efas, first), 0); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return 1
		}
		return exitCode(errs.n > 0, read)
	}

	// Each read is due at first.at + i*interval, so the time the reads
	// take does not push the next ones later.
	prev, total := first, read
	for i := 1; o.count == 0 || i <= o.count; i++ {
		due := first.at.Add(time.Duration(i) * o.interval)
		if err := env.sleep(ctx, due.Sub(env.now())); err != nil {
			break // interrupted
		}
		cur, n := readSample(root, efas, env.now(), true, errs)
		total += n
		if err := out.write(rateReport(efas, prev, cur), i); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return 1
		}
		prev = cur
	}
	return exitCode(errs.n > 0, total)
}

// exitCode is 1 when there were errors and not one counter was read.
func exitCode(hadErrors bool, read int) int {
	if hadErrors && read == 0 {
		return 1
	}
	return 0
}

// chooseEFAs returns the EFAs --device names, in discovery order, or all of
// them without --device. A name that matches no EFA is an error: a typo
// must not look like an idle device.
func chooseEFAs(all []*efa.Device, wanted []string) ([]*efa.Device, error) {
	if len(wanted) == 0 {
		return all, nil
	}
	want := map[*efa.Device]bool{}
	for _, n := range wanted {
		a, aerr := pcie.ParseAddress(n)
		found := false
		for _, d := range all {
			if d.Name == n || aerr == nil && d.PCI.Address == a {
				want[d], found = true, true
			}
		}
		if !found {
			var have []string
			for _, d := range all {
				have = append(have, d.Name)
			}
			return nil, fmt.Errorf("--device %q: no such EFA (found: %s)", names.Printable(n), strings.Join(have, ", "))
		}
	}
	var out []*efa.Device
	for _, d := range all {
		if want[d] {
			out = append(out, d)
		}
	}
	return out, nil
}

// errorPrinter prints each error once, when first seen: a broken file is
// not repeated every interval.
type errorPrinter struct {
	w      io.Writer
	prefix string
	seen   map[string]bool
	n      int // errors seen, printed or not
}

func (p *errorPrinter) print(err error) {
	var joined interface{ Unwrap() []error }
	switch {
	case err == nil:
		return
	case errors.As(err, &joined):
		for _, e := range joined.Unwrap() {
			p.print(e)
		}
		return
	}
	p.n++
	if msg := err.Error(); !p.seen[msg] {
		p.seen[msg] = true
		fmt.Fprintf(p.w, "%s: %s\n", p.prefix, msg)
	}
}

// sample is the counters of the chosen EFAs at one moment.
type sample struct {
	at   time.Time
	efas []efaSample // in the order of the EFAs read
}

// efaSample is one EFA's counters: a counter absent from a map is unknown,
// and a map is nil when nothing of it was read.
type efaSample struct {
	device map[string]uint64
	ports  []portSample // in the order of efa.Device.Ports
}

type portSample struct {
	number   int
	state    string  // "" when unknown
	rateGbps float64 // 0 when unknown
	counters map[string]uint64
}

// readSample reads the counters of efas, at the time given, and says how
// many it read. With fresh it reads each port's state and rate again; for
// the first sample discovery has just read them.
func readSample(fsys fs.ReadLinkFS, efas []*efa.Device, at time.Time, fresh bool, errs *errorPrinter) (sample, int) {
	s := sample{at: at}
	read := 0
	for _, d := range efas {
		c, err := d.ReadCounters(fsys)
		errs.print(err)
		es := efaSample{device: c.Device}
		read += len(c.Device)
		for _, p := range d.Ports {
			ps := portSample{number: p.Number, state: p.State, rateGbps: p.RateGbps, counters: c.Ports[p.Number]}
			read += len(ps.counters)
			if fresh {
				l, err := d.ReadPortLink(fsys, p.Number)
				errs.print(err)
				ps.state, ps.rateGbps = l.State, l.RateGbps
			}
			es.ports = append(es.ports, ps)
		}
		s.efas = append(s.efas, es)
	}
	return s, read
}

// countersReport is what counters prints, once or for one interval: the
// JSON form, and the table is printed from it.
type countersReport struct {
	Time string `json:"time"` // RFC 3339, when the (last) values were read
	// ElapsedSeconds is the interval's length, with --interval only.
	ElapsedSeconds *float64         `json:"elapsedSeconds,omitempty"`
	EFAs           []efaCounterView `json:"efas"`
}

type efaCounterView struct {
	Name       string `json:"name"`
	PCIAddress string `json:"pciAddress"`
	counterSet
	Ports []portCounterView `json:"ports"`
}

type portCounterView struct {
	Port     int     `json:"port"`
	State    string  `json:"state,omitempty"`
	RateGbps float64 `json:"rateGbps,omitempty"`
	counterSet
}

// counterSet is one device's or port's counters: values once, or with
// --interval the deltas over it and the counters that went down (a driver
// reload or a wrap: how much they counted meanwhile is not known).
type counterSet struct {
	Counters map[string]uint64 `json:"counters,omitempty"`
	Deltas   map[string]uint64 `json:"deltas,omitempty"`
	Reset    []string          `json:"reset,omitempty"`
}

// onceReport is the values of one sample.
func onceReport(efas []*efa.Device, s sample) countersReport {
	rep := countersReport{Time: s.at.Format(time.RFC3339Nano), EFAs: []efaCounterView{}}
	for i, d := range efas {
		v := efaCounterView{Name: d.Name, PCIAddress: d.PCI.Address.String(), counterSet: counterSet{Counters: s.efas[i].device}, Ports: []portCounterView{}}
		for _, p := range s.efas[i].ports {
			v.Ports = append(v.Ports, portCounterView{Port: p.number, State: p.state, RateGbps: p.rateGbps, counterSet: counterSet{Counters: p.counters}})
		}
		rep.EFAs = append(rep.EFAs, v)
	}
	return rep
}

// rateReport is the deltas from prev to cur; port state and rate are
// cur's.
func rateReport(efas []*efa.Device, prev, cur sample) countersReport {
	secs := cur.at.Sub(prev.at).Seconds()
	rep := countersReport{Time: cur.at.Format(time.RFC3339Nano), ElapsedSeconds: &secs, EFAs: []efaCounterView{}}
	for i, d := range efas {
		v := efaCounterView{Name: d.Name, PCIAddress: d.PCI.Address.String(), counterSet: deltas(prev.efas[i].device, cur.efas[i].device), Ports: []portCounterView{}}
		for j, p := range cur.efas[i].ports {
			v.Ports = append(v.Ports, portCounterView{Port: p.number, State: p.state, RateGbps: p.rateGbps,
				counterSet: deltas(prev.efas[i].ports[j].counters, p.counters)})
		}
		rep.EFAs = append(rep.EFAs, v)
	}
	return rep
}

// deltas is cur - prev for each counter read both times; one that went
// down is in Reset instead, never a negative or huge delta.
func deltas(prev, cur map[string]uint64) counterSet {
	var c counterSet
	for name, v := range cur {
		was, ok := prev[name]
		switch {
		case !ok:
		case v < was:
			c.Reset = append(c.Reset, name)
		default:
			if c.Deltas == nil {
				c.Deltas = map[string]uint64{}
			}
			c.Deltas[name] = v - was
		}
	}
	slices.Sort(c.Reset)
	return c
}

// counterWriter prints reports as a table or as JSON.
type counterWriter struct {
	w      io.Writer
	format string
	all    bool
	units  map[string]string // the catalogue's; a counter it lacks counts
}

// counterUnits is the unit of every counter of the catalogue, by name.
func counterUnits() map[string]string {
	m := map[string]string{}
	for _, c := range efa.KnownCounters() {
		m[c.Name] = c.Unit
	}
	return m
}

// tableColumns are the counters of the default table, by header: what an
// operator looks at first. Every other counter is in --all and -o json.
func tableColumns() [][2]string {
	return [][2]string{
		{"TX", "tx_bytes"}, {"RX", "rx_bytes"}, {"TX PKTS", "tx_pkts"}, {"RX PKTS", "rx_pkts"},
		{"RDMA READ", "rdma_read_bytes"}, {"RDMA WRITE", "rdma_write_bytes"}, {"RX DROPS", "rx_drops"},
		{"RETRANS", "retrans_pkts"}, {"UNRESPONSIVE", "unresponsive_remote_events"},
		{"IMPAIRED", "impaired_remote_conn_events"},
	}
}

// write prints one report; n is the interval's number (0 once), which in a
// table puts a blank line between intervals. JSON is indented once, and one
// line an interval (JSON lines).
func (cw *counterWriter) write(rep countersReport, n int) error {
	if cw.format == "json" {
		var b []byte
		var err error
		if rep.ElapsedSeconds == nil {
			b, err = json.MarshalIndent(rep, "", "  ")
		} else {
			b, err = json.Marshal(rep)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(cw.w, "%s\n", b)
		return err
	}
	secs := 0.0
	if rep.ElapsedSeconds != nil {
		secs = *rep.ElapsedSeconds
		if n > 1 {
			fmt.Fprintln(cw.w)
		}
		t, _ := time.Parse(time.RFC3339Nano, rep.Time)
		fmt.Fprintf(cw.w, "%s: per second over %.3f s\n", t.Format(time.TimeOnly), secs)
	}
	tw := tabwriter.NewWriter(cw.w, 0, 4, 2, ' ', 0)
	if cw.all {
		cw.writeAll(tw, rep, secs)
	} else {
		cw.writeTable(tw, rep, secs)
	}
	if len(rep.EFAs) == 0 {
		fmt.Fprintln(tw, "(no EFA devices)")
	}
	return tw.Flush()
}

func (cw *counterWriter) writeTable(w io.Writer, rep countersReport, secs float64) {
	cols := tableColumns()
	head := []string{"DEVICE", "PCI", "PORT", "STATE", "RATE"}
	for _, c := range cols {
		head = append(head, c[0])
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, e := range rep.EFAs {
		ports := e.Ports
		if len(ports) == 0 {
			ports = []portCounterView{{}} // one row of unknowns: the EFA stays in view
		}
		for _, p := range ports {
			row := []string{e.Name, e.PCIAddress, "-", dash(p.State), "-"}
			if p.Port != 0 {
				row[2] = strconv.Itoa(p.Port)
			}
			if p.RateGbps != 0 {
				row[4] = fmt.Sprintf("%g Gb/s", p.RateGbps)
			}
			for _, c := range cols {
				row = append(row, cw.cell(p.counterSet, c[1], secs))
			}
			fmt.Fprintln(w, strings.Join(row, "\t"))
		}
	}
}

// writeAll prints one row per counter: the device's, then each port's, the
// catalogue's first (in its order, "-" where unknown), then any others the
// driver has, by name.
func (cw *counterWriter) writeAll(w io.Writer, rep countersReport, secs float64) {
	fmt.Fprintln(w, "DEVICE\tPCI\tPORT\tCOUNTER\tVALUE")
	known := efa.KnownCounters()
	for _, e := range rep.EFAs {
		for _, name := range counterOrder(known, false, e.counterSet) {
			fmt.Fprintf(w, "%s\t%s\t-\t%s\t%s\n", e.Name, e.PCIAddress, name, cw.cell(e.counterSet, name, secs))
		}
		for _, p := range e.Ports {
			for _, name := range counterOrder(known, true, p.counterSet) {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", e.Name, e.PCIAddress, p.Port, name, cw.cell(p.counterSet, name, secs))
			}
		}
	}
}

// counterOrder is the names --all lists for a device (port false) or a
// port: the catalogue's, then the others c holds, by name.
func counterOrder(known []efa.CounterInfo, port bool, c counterSet) []string {
	var out []string
	in := map[string]bool{}
	for _, k := range known {
		if k.Port == port {
			out = append(out, k.Name)
			in[k.Name] = true
		}
	}
	var extra []string
	for _, m := range []map[string]uint64{c.Counters, c.Deltas} {
		for name := range m {
			if !in[name] {
				extra = append(extra, name)
				in[name] = true
			}
		}
	}
	for _, name := range c.Reset {
		if !in[name] {
			extra = append(extra, name)
			in[name] = true
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// cell is one counter's value (secs 0) or rate per second, "-" when
// unknown and "reset" when it went down.
func (cw *counterWriter) cell(c counterSet, name string, secs float64) string {
	if slices.Contains(c.Reset, name) {
		return "reset"
	}
	unit := cw.units[name]
	if secs == 0 {
		v, ok := c.Counters[name]
		if !ok {
			return "-"
		}
		if unit == "bytes" {
			return humanBytes(v)
		}
		return humanCount(v)
	}
	v, ok := c.Deltas[name]
	if !ok || secs < 0 {
		return "-"
	}
	perSec := float64(v) / secs
	if unit == "bytes" {
		return scaled(perSec*8, 1000, " ", "b/s", []string{"kb/s", "Mb/s", "Gb/s", "Tb/s", "Pb/s"})
	}
	return scaled(perSec, 1000, "", "/s", []string{"k/s", "M/s", "G/s", "T/s", "P/s"})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanBytes prints a byte count in binary units: 512 B, 1.5 KiB, 2.0 GiB.
func humanBytes(v uint64) string {
	return scaled(float64(v), 1024, " ", "B", []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"})
}

// humanCount prints a count: 999, 1.0k, 12.3M.
func humanCount(v uint64) string {
	return scaled(float64(v), 1000, "", "", []string{"k", "M", "G", "T", "P", "E"})
}

// scaled prints v with one decimal in the largest unit that keeps it at
// least 1 as printed (1023.96 KiB is 1.0 MiB, not 1024.0 KiB), or in unit0
// below the first step, without ".0" (512 B, 0/s).
func scaled(v, step float64, sep, unit0 string, units []string) string {
	unit := unit0
	for i := 0; i < len(units); i++ {
		if f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 1, 64), 64); f < step {
			break
		}
		v /= step
		unit = units[i]
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if unit == unit0 {
		s = strings.TrimSuffix(s, ".0")
	}
	return s + sep + unit
}
