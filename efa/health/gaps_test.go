package health_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/efakit/efakit/efa/health"
)

// The counters the model moves: one rule each, and the two that the
// work-request rule sums.
var modelCounters = []string{"no_completion_cmds", "retrans_timeout_events", "rdma_read_wr_err", "rdma_write_wr_err"}

// increment is one real advance of a counter.
type increment struct {
	at time.Time
	n  uint64
}

// device is an EFA's counters as the efa driver keeps them, with every
// real increment it made: a reload sets them back to 0 without an
// increment.
type device struct {
	val   map[string]uint64
	incs  map[string][]increment
	clean map[string]bool // never missing from a read, never reset
}

// realIncrements is how much the counters named really advanced in
// (after, upTo].
func (d *device) realIncrements(names []string, after, upTo time.Time) uint64 {
	var sum uint64
	for _, n := range names {
		for _, i := range d.incs[n] {
			if i.at.After(after) && !i.at.After(upTo) {
				sum += i.n
			}
		}
	}
	return sum
}

// checkNoPhantomAdvance drives a Tracker with the sample sequence data
// encodes (4 bytes a step: the time to the next read, what happened to
// the counters, which ones the read missed, how far they moved) and
// checks every verdict: no rule's count exceeds its counters' real
// increments since the window's baseline, and a counter whose reads never
// had a gap or a reset is counted exactly.
func checkNoPhantomAdvance(t *testing.T, data []byte) {
	t.Helper()
	p := health.DefaultPolicy()
	p.Window = time.Minute
	tr := health.NewTracker(p)
	d := &device{val: map[string]uint64{}, incs: map[string][]increment{}, clean: map[string]bool{}}
	for _, n := range modelCounters {
		d.clean[n] = true
	}
	at := t0
	var read []time.Time // the samples that had counters
	for step := 0; len(data) >= 4; step++ {
		dt, what, missing, amount := data[0], data[1], data[2], data[3]
		data = data[4:]
		at = at.Add(time.Duration(1+dt%40) * time.Second)
		switch what % 8 {
		case 0: // the driver reloaded: every counter starts again from 0
			for _, n := range modelCounters {
				d.val[n] = 0
				d.clean[n] = false
			}
		case 1, 2, 3, 4: // some counters advance: by a little, or a lot
			for i, n := range modelCounters {
				if what>>(4+i%4)&1 == 0 {
					continue
				}
				by := uint64(amount % 16)
				if what%8 == 4 {
					by = uint64(amount) << 32
				}
				if by > 0 {
					d.val[n] += by
					d.incs[n] = append(d.incs[n], increment{at, by})
				}
			}
		}
		s := health.Sample{At: at, State: "ACTIVE", RateGbps: 100}
		switch {
		case what%8 == 5: // not read in time: no counters at all
		case what%8 == 6: // the counter files are gone: an empty read
			s.Counters = map[string]uint64{}
			for _, n := range modelCounters {
				d.clean[n] = false
			}
		default:
			s.Counters = map[string]uint64{}
			for i, n := range modelCounters {
				if missing>>i&1 == 1 && missing&0x80 != 0 {
					d.clean[n] = false // this read of it failed
					continue
				}
				s.Counters[n] = d.val[n]
			}
		}
		if s.Counters != nil {
			read = append(read, at)
		}
		v := tr.Observe("efa0", s, 100)
		if len(read) == 0 {
			continue
		}
		// The baseline: the last sample with counters at or before the
		// window's start, else the first.
		base := read[0]
		for _, r := range read {
			if !r.After(at.Add(-p.Window)) {
				base = r
			}
		}
		for _, r := range p.Rules {
			got, ok := v.Counts[r.Name]
			if !ok {
				continue
			}
			real := d.realIncrements(r.Counters, base, at)
			if got > real {
				t.Fatalf("step %d (t=%s): %s counted %d, but its counters %v advanced %d since %s", step, at.Sub(t0), r.Name, got, r.Counters, real, base.Sub(t0))
			}
			exact := true
			for _, n := range r.Counters {
				exact = exact && d.clean[n]
			}
			if exact && got != real {
				t.Fatalf("step %d (t=%s): %s counted %d, want %d: its counters were read every time, never reset", step, at.Sub(t0), r.Name, got, real)
			}
		}
	}
}

// TestNoPhantomAdvance: random sample sequences (counters advancing,
// missing from one read or many, the device's counter files gone, reads
// not made, reloads back to 0, jumps of 2^32 and more) never make a rule
// count more than its counters really advanced.
func TestNoPhantomAdvance(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 2026))
	for range 3000 {
		data := make([]byte, 4*(1+rng.IntN(60)))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkNoPhantomAdvance(t, data)
		if t.Failed() {
			return
		}
	}
}

// FuzzNoPhantomAdvance is TestNoPhantomAdvance's property under the
// fuzzer; its seeds are the driver reload of a real node (the counter
// files gone for one read, back at 0) and the gaps around it.
func FuzzNoPhantomAdvance(f *testing.F) {
	// 4 bytes a step: time, what (bits 4-7: which counters advance),
	// missing (bit 7 on: bits 0-3 are the counters a read misses),
	// amount.
	f.Add([]byte{10, 0xf1, 0, 5, 10, 0xf1, 0, 3, 10, 6, 0, 0, 10, 0, 0, 0, 10, 7, 0, 0})
	f.Add([]byte{10, 0x11, 0, 2, 10, 7, 0x81, 0, 10, 0, 0, 0, 10, 7, 0, 0})
	f.Add([]byte{5, 0xf2, 0, 9, 5, 5, 0, 0, 5, 0, 0, 0, 5, 0xf1, 0, 1})
	f.Add([]byte{39, 0xf4, 0, 255, 39, 0xf1, 0x8f, 1, 39, 0xf1, 0, 1, 39, 0, 0, 0, 39, 7, 0, 0})
	f.Fuzz(checkNoPhantomAdvance)
}
