// Package health grades an EFA's health from what sysfs shows of it over
// time: its port's state and link rate, and the rates of its hardware
// counters over a sliding window. The grades are three:
//
//   - Healthy;
//   - Degraded: the device works, but its counters say the fabric path or
//     its peers misbehave (retransmit timeouts, unresponsive or impaired
//     remotes, work-request errors), its link runs below the node's rate,
//     or its port flaps. Such counters also move when the fault is a
//     remote's, so a degraded device is only marked, never avoided;
//   - Unhealthy: the device cannot serve a new job: its admin queue
//     stopped answering the driver (no_completion_cmds), or, outside this
//     package, it is gone, unbound or its port is not ACTIVE.
//
// A Tracker keeps each device's samples over the Policy's window. A rule
// fires when its counters advanced by at least its limit within the window,
// and clears only once they advanced by at most half the limit
// (ClearFraction): a device at the limit's edge does not flap between
// grades at every sample. A counter is counted only over its unbroken run
// of reads: one that a read missed (its file gone, the read failed) or
// that went back (a driver reload starts the counters again from 0)
// starts again from that sample, so a gap never reads as an advance. The
// rules, their counters and their defaults,
// with the sources they rest on, are in docs/operations.md.
package health

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Grade is how healthy a device is, from best to worst.
type Grade int

// The grades, from best to worst.
const (
	Healthy Grade = iota
	Degraded
	Unhealthy
)

func (g Grade) String() string {
	switch g {
	case Healthy:
		return "Healthy"
	case Degraded:
		return "Degraded"
	case Unhealthy:
		return "Unhealthy"
	}
	return fmt.Sprintf("Grade(%d)", int(g))
}

// The names of the rules (Rule.Name), also the reasons a Verdict gives:
// label values, so that a taint's value can be one.
const (
	RuleRetransmitTimeouts  = "retransmit-timeouts"
	RuleUnresponsiveRemotes = "unresponsive-remotes"
	RuleImpairedConnections = "impaired-connections"
	RuleWorkRequestErrors   = "work-request-errors"
	RuleAdminTimeouts       = "admin-timeouts"
	// RulePortFlaps counts the port's state changes that the samples saw
	// within the window (changes between two samples are not seen).
	RulePortFlaps = "port-flaps"
	// ReasonLinkBelowRate is a port whose link rate is below the
	// highest of the node's EFAs (Observe's nodeRate).
	ReasonLinkBelowRate = "link-below-rate"
)

// Rule turns the advance of some counters within the window into a grade.
type Rule struct {
	Name string // a label value, the reason a verdict gives
	// Counters are summed: port counters (ports/1/hw_counters) and device
	// counters (hw_counters) by file name. A rule whose counters a device
	// does not have (older hardware or driver) never fires for it.
	Counters []string
	Grade    Grade
	// Limit is the advance within the window at which the rule fires; 0
	// turns the rule off.
	Limit uint64
	What  string // what one step of the counters is, plural: "retransmit timeouts"
}

// Policy is what the grades rest on.
type Policy struct {
	// Window is how far back a rule counts.
	Window time.Duration
	// ClearFraction is the share of its limit that a fired rule's advance
	// within the window must fall to before the rule clears.
	ClearFraction float64
	Rules         []Rule
	// FlapLimit is how many port state changes within the window make the
	// port flapping (Degraded); 0 turns it off.
	FlapLimit int
	// BelowRate makes a link slower than the node's fastest EFA Degraded.
	BelowRate bool
}

// DefaultPolicy is the policy the plugin runs unless told otherwise. Its
// limits are argued in docs/operations.md: none is a measured fleet
// baseline, each is set so that one incident (a peer job that dies, a
// burst of path changes in a congested collective) stays under it and a
// fault that lasts minutes crosses it.
func DefaultPolicy() Policy {
	return Policy{
		Window:        5 * time.Minute,
		ClearFraction: 0.5,
		Rules: []Rule{
			{RuleAdminTimeouts, []string{"no_completion_cmds"}, Unhealthy, 1, "admin commands without completion"},
			{RuleRetransmitTimeouts, []string{"retrans_timeout_events"}, Degraded, 60, "retransmit timeouts"},
			{RuleUnresponsiveRemotes, []string{"unresponsive_remote_events"}, Degraded, 10, "unresponsive remotes"},
			{RuleImpairedConnections, []string{"impaired_remote_conn_events"}, Degraded, 10, "impaired connections"},
			{RuleWorkRequestErrors, []string{"rdma_read_wr_err", "rdma_write_wr_err"}, Degraded, 10, "failed RDMA work requests"},
		},
		FlapLimit: 3,
		BelowRate: true,
	}
}

// SetLimit sets the limit of the rule named (RulePortFlaps included).
func (p *Policy) SetLimit(name string, limit uint64) error {
	if name == RulePortFlaps {
		if limit > math.MaxInt32 {
			return fmt.Errorf("%s: limit %d is too large", name, limit)
		}
		p.FlapLimit = int(limit)
		return nil
	}
	for i := range p.Rules {
		if p.Rules[i].Name == name {
			p.Rules[i].Limit = limit
			return nil
		}
	}
	names := []string{RulePortFlaps}
	for _, r := range p.Rules {
		names = append(names, r.Name)
	}
	sort.Strings(names)
	return fmt.Errorf("no health rule %q (the rules: %s)", name, strings.Join(names, ", "))
}

// Validate says what is wrong with the policy, nil when nothing.
func (p Policy) Validate() error {
	switch {
	case p.Window <= 0:
		return fmt.Errorf("health window %s: must be positive", p.Window)
	case p.ClearFraction < 0 || p.ClearFraction >= 1:
		return fmt.Errorf("health clear fraction %g: must be in [0, 1)", p.ClearFraction)
	case p.FlapLimit < 0:
		return fmt.Errorf("port flap limit %d: must not be negative", p.FlapLimit)
	}
	return nil
}

// Sample is what one scan read of a device.
type Sample struct {
	At       time.Time
	State    string  // the port's state, "ACTIVE", "DOWN", ...; "" when unknown
	RateGbps float64 // the port's link rate; 0 when unknown
	// Counters are the device's and its port's counters by file name; a
	// counter that could not be read is absent (unknown, never 0).
	Counters map[string]uint64
}

// Verdict is a device's grade and why.
type Verdict struct {
	Grade Grade
	// Reason is the worst fired rule's name (a label value); "" when
	// Healthy.
	Reason string
	// Message names every rule that holds, with the count it fired at
	// ("12 failed RDMA work requests in 5m0s (limit 10)"); "" when
	// Healthy.
	Message string
	// Counts are each rule's advance within the window, by rule name,
	// for the rules the device has counters for.
	Counts map[string]uint64
}

// Tracker keeps each device's samples and its fired rules. It is not safe
// for concurrent use: one scanning goroutine owns it.
type Tracker struct {
	p    Policy
	devs map[string]*history
	// counted are the counters the rules count: the only ones whose
	// runs are kept.
	counted []string
}

type history struct {
	// samples are those with counters, oldest first; the first is the
	// window's baseline.
	samples []Sample
	// since is, by counter, when its unbroken run of reads began: every
	// sample from then on has it, never lower than the sample before. A
	// counter's advance is counted only within its run.
	since map[string]time.Time
	state string            // the port's state at the last sample that knew it
	flaps []time.Time       // the times the port's state was seen to change
	fired map[string]uint64 // the rules that hold, with the count each fired at
}

// NewTracker tracks devices under p, which must be valid.
func NewTracker(p Policy) *Tracker {
	p.Rules = slices.Clone(p.Rules)
	var counted []string
	for _, r := range p.Rules {
		for _, c := range r.Counters {
			if !slices.Contains(counted, c) {
				counted = append(counted, c)
			}
		}
	}
	return &Tracker{p: p, devs: map[string]*history{}, counted: counted}
}

// Policy is the tracker's policy.
func (t *Tracker) Policy() Policy { return t.p }

// Observe adds a sample of the device named and grades it. nodeRate is
// the highest link rate of the node's EFAs (0 when unknown): a link below
// it is Degraded where the policy says so.
func (t *Tracker) Observe(name string, s Sample, nodeRate float64) Verdict {
	h := t.devs[name]
	if h == nil {
		h = &history{fired: map[string]uint64{}}
		t.devs[name] = h
	}
	start := s.At.Add(-t.p.Window)
	if s.State != "" {
		if h.state != "" && h.state != s.State {
			h.flaps = append(h.flaps, s.At)
		}
		h.state = s.State
	}
	// A sample without counters (not read in time, or not yet) leaves the
	// counted history as it is.
	if s.Counters != nil {
		if n := len(h.samples); n > 0 && !s.At.After(h.samples[n-1].At) {
			// The clock went back: the old samples say nothing now.
			h.samples, h.since = h.samples[:0], nil
		}
		h.continueRuns(s, t.counted)
		h.samples = append(h.samples, s)
	}
	// Keep one sample at or before the window's start: the baseline the
	// window's advance is counted from.
	i := 0
	for i+1 < len(h.samples) && !h.samples[i+1].At.After(start) {
		i++
	}
	h.samples = slices.Delete(h.samples, 0, i)
	h.flaps = slices.DeleteFunc(h.flaps, func(at time.Time) bool { return !at.After(start) })

	v := Verdict{Counts: map[string]uint64{}}
	var why []string
	// A fired rule's message gives the count it fired at: the message
	// stays the same while the rule holds, so that what carries it (the
	// claim's status, the kubelet's report) is not rewritten at every
	// sample.
	fire := func(name string, g Grade, count, limit uint64, msg func(uint64) string) {
		at, was := h.fired[name]
		switch {
		case limit > 0 && !was && count >= limit:
			at = count
		case limit > 0 && was && float64(count) > t.p.ClearFraction*float64(limit):
		default:
			delete(h.fired, name)
			return
		}
		h.fired[name] = at
		why = append(why, msg(at))
		if g > v.Grade {
			v.Grade, v.Reason = g, name
		}
	}
	for _, r := range t.p.Rules {
		count, ok := h.advance(r.Counters)
		if !ok {
			delete(h.fired, r.Name)
			continue
		}
		v.Counts[r.Name] = count
		fire(r.Name, r.Grade, count, r.Limit, func(at uint64) string {
			return fmt.Sprintf("%d %s in %s (limit %d)", at, r.What, t.p.Window, r.Limit)
		})
	}
	flaps := uint64(len(h.flaps))
	v.Counts[RulePortFlaps] = flaps
	fire(RulePortFlaps, Degraded, flaps, uint64(t.p.FlapLimit), func(at uint64) string {
		return fmt.Sprintf("port state changed %d times in %s (limit %d)", at, t.p.Window, t.p.FlapLimit)
	})
	if t.p.BelowRate && s.RateGbps > 0 && s.RateGbps < nodeRate {
		why = append(why, fmt.Sprintf("link at %g Gb/s, below the node's %g Gb/s", s.RateGbps, nodeRate))
		if v.Grade < Degraded {
			v.Grade, v.Reason = Degraded, ReasonLinkBelowRate
		}
	}
	v.Message = strings.Join(why, "; ")
	return v
}

// Retain forgets the devices not named: gone from the node, their history
// starts again when they return.
func (t *Tracker) Retain(names map[string]bool) {
	for n := range t.devs {
		if !names[n] {
			delete(t.devs, n)
		}
	}
}

// continueRuns updates the runs of the counters named with the sample s,
// the newest. A counter's run goes on while every read has it and it
// never goes back. One missing from the sample before (its file was gone,
// or its read failed) or lower than there (the driver reloaded and
// started it again from 0) starts a new run at s: what it did in between
// is unknown, so nothing before s is counted. A counter missing from s
// ends its run.
func (h *history) continueRuns(s Sample, names []string) {
	var prev map[string]uint64
	if n := len(h.samples); n > 0 {
		prev = h.samples[n-1].Counters
	}
	if h.since == nil {
		h.since = make(map[string]time.Time, len(names))
	}
	for _, name := range names {
		v, ok := s.Counters[name]
		if !ok {
			delete(h.since, name)
			continue
		}
		p, had := prev[name]
		if _, running := h.since[name]; !had || !running || v < p {
			h.since[name] = s.At
		}
	}
}

// advance is the sum of the named counters' advance within the window,
// each counted from the first sample of the window that its run holds;
// false when a counter is missing from the newest sample. Within a run a
// counter never goes back, so no difference is negative.
func (h *history) advance(names []string) (uint64, bool) {
	if len(h.samples) == 0 {
		return 0, false
	}
	now := h.samples[len(h.samples)-1].Counters
	var sum uint64
	for _, n := range names {
		v, ok := now[n]
		began, running := h.since[n]
		if !ok || !running {
			return 0, false
		}
		// The first sample at or after the run began: the window's
		// baseline if the run holds it.
		i, _ := slices.BinarySearchFunc(h.samples, began, func(s Sample, at time.Time) int { return s.At.Compare(at) })
		if i == len(h.samples) {
			return 0, false
		}
		b, ok := h.samples[i].Counters[n]
		if !ok || v < b {
			return 0, false // not a run after all: never a wrapped difference
		}
		if sum+(v-b) < sum {
			return math.MaxUint64, true
		}
		sum += v - b
	}
	return sum, true
}

// ParseLimits sets the limits of p from "rule=limit,rule=limit" (the
// plugin's --health-limits): rules not named keep theirs; a limit of 0
// turns its rule off.
func (p *Policy) ParseLimits(s string) error {
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("%q: want rule=limit", item)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return fmt.Errorf("%q: the limit is not a count: %w", item, err)
		}
		if err := p.SetLimit(strings.TrimSpace(name), n); err != nil {
			return err
		}
	}
	return nil
}

// Limits are the policy's limits in ParseLimits' form, rules sorted.
func (p Policy) Limits() string {
	items := []string{fmt.Sprintf("%s=%d", RulePortFlaps, p.FlapLimit)}
	for _, r := range p.Rules {
		items = append(items, fmt.Sprintf("%s=%d", r.Name, r.Limit))
	}
	sort.Strings(items)
	return strings.Join(items, ",")
}
