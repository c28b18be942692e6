package health_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa/health"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// counters are a healthy p5 EFA's, with the given ones set.
func counters(set map[string]uint64) map[string]uint64 {
	c := map[string]uint64{
		"no_completion_cmds": 0, "retrans_timeout_events": 0, "unresponsive_remote_events": 0,
		"impaired_remote_conn_events": 0, "rdma_read_wr_err": 0, "rdma_write_wr_err": 0,
		"tx_pkts": 1000,
	}
	for k, v := range set {
		c[k] = v
	}
	return c
}

func sample(at time.Duration, set map[string]uint64) health.Sample {
	return health.Sample{At: t0.Add(at), State: "ACTIVE", RateGbps: 100, Counters: counters(set)}
}

func TestHealthyStaysHealthy(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	for i := range 40 {
		v := tr.Observe("efa0", sample(time.Duration(i)*10*time.Second, map[string]uint64{"tx_pkts": uint64(1000 * i)}), 100)
		require.Equal(t, health.Healthy, v.Grade, "sample %d", i)
		assert.Empty(t, v.Reason)
		assert.Empty(t, v.Message)
	}
}

// TestRetransmitTimeoutsDegradeWithHysteresis: the rule fires at its
// limit within the window, holds while the window's count stays above
// half the limit, and clears below it.
func TestRetransmitTimeoutsDegradeWithHysteresis(t *testing.T) {
	p := health.DefaultPolicy()
	p.Window = time.Minute
	require.NoError(t, p.SetLimit(health.RuleRetransmitTimeouts, 10))
	tr := health.NewTracker(p)
	at := func(s int, n uint64) health.Verdict {
		return tr.Observe("efa0", sample(time.Duration(s)*time.Second, map[string]uint64{"retrans_timeout_events": n}), 100)
	}
	assert.Equal(t, health.Healthy, at(0, 100).Grade, "the first sample is the baseline: no advance yet")
	assert.Equal(t, health.Healthy, at(10, 109).Grade, "9 in the window, under 10")
	v := at(20, 110)
	assert.Equal(t, health.Degraded, v.Grade, "10 in the window")
	assert.Equal(t, health.RuleRetransmitTimeouts, v.Reason)
	assert.Equal(t, "10 retransmit timeouts in 1m0s (limit 10)", v.Message)
	assert.Equal(t, uint64(10), v.Counts[health.RuleRetransmitTimeouts])
	// The window slides past the baseline (t=0): from t=10 (109) the
	// advance is 7, under the limit but over half of it: still degraded.
	assert.Equal(t, health.Degraded, at(70, 116).Grade, "7 since t=10: held")
	// From t=20 (110), 5: not over half of 10: cleared.
	assert.Equal(t, health.Healthy, at(80, 115+0).Grade, "5 since t=20: cleared")
	// Once cleared, 7 is not enough to fire again.
	assert.Equal(t, health.Healthy, at(90, 117).Grade, "7 since t=30: under the limit")
}

func TestAdminTimeoutIsUnhealthy(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, nil), 100)
	v := tr.Observe("efa0", sample(10*time.Second, map[string]uint64{"no_completion_cmds": 1, "retrans_timeout_events": 100}), 100)
	assert.Equal(t, health.Unhealthy, v.Grade)
	assert.Equal(t, health.RuleAdminTimeouts, v.Reason, "the worst grade's rule names it")
	assert.Contains(t, v.Message, "1 admin commands without completion")
	assert.Contains(t, v.Message, "100 retransmit timeouts", "every fired rule is in the message")
	// Five minutes with no new timeout: the window no longer holds it.
	v = tr.Observe("efa0", sample(5*time.Minute+20*time.Second, map[string]uint64{"no_completion_cmds": 1, "retrans_timeout_events": 100}), 100)
	assert.Equal(t, health.Healthy, v.Grade, v.Message)
}

func TestWorkRequestErrorsSum(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, nil), 100)
	v := tr.Observe("efa0", sample(10*time.Second, map[string]uint64{"rdma_read_wr_err": 4, "rdma_write_wr_err": 6}), 100)
	assert.Equal(t, health.Degraded, v.Grade)
	assert.Equal(t, health.RuleWorkRequestErrors, v.Reason)
}

// TestMissingCountersNeverFire: hardware without the network counters
// (before Nitro v4) is graded on what it has; an unknown counter is not 0.
func TestMissingCountersNeverFire(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	old := func(at time.Duration, n uint64) health.Sample {
		return health.Sample{At: t0.Add(at), State: "ACTIVE", RateGbps: 100, Counters: map[string]uint64{"rdma_read_wr_err": n, "no_completion_cmds": 0}}
	}
	tr.Observe("efa0", old(0, 0), 100)
	v := tr.Observe("efa0", old(10*time.Second, 3), 100)
	assert.Equal(t, health.Healthy, v.Grade)
	assert.NotContains(t, v.Counts, health.RuleRetransmitTimeouts)
	assert.NotContains(t, v.Counts, health.RuleWorkRequestErrors, "rdma_write_wr_err is missing: the sum is unknown")
	assert.Contains(t, v.Counts, health.RuleAdminTimeouts)
}

// TestCounterResetStartsAgain: a driver reload starts the counters from
// 0; the drop is not an advance of 2^64 - n.
func TestCounterResetStartsAgain(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, map[string]uint64{"retrans_timeout_events": 500}), 100)
	v := tr.Observe("efa0", sample(10*time.Second, map[string]uint64{"retrans_timeout_events": 3, "tx_pkts": 0}), 100)
	assert.Equal(t, health.Healthy, v.Grade, v.Message)
	v = tr.Observe("efa0", sample(20*time.Second, map[string]uint64{"retrans_timeout_events": 70, "tx_pkts": 10}), 100)
	assert.Equal(t, health.Degraded, v.Grade, "counted from the reload's first sample")
	assert.Equal(t, uint64(67), v.Counts[health.RuleRetransmitTimeouts])
}

func TestPortFlaps(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	states := []string{"ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE"}
	var v health.Verdict
	for i, st := range states {
		s := sample(time.Duration(i)*10*time.Second, nil)
		s.State = st
		v = tr.Observe("efa0", s, 100)
		if i < 3 {
			assert.Equal(t, health.Healthy, v.Grade, "%d changes", i)
		}
	}
	assert.Equal(t, health.Degraded, v.Grade)
	assert.Equal(t, health.RulePortFlaps, v.Reason)
	assert.Equal(t, uint64(4), v.Counts[health.RulePortFlaps])
	// Steady for a window: the changes leave it.
	v = tr.Observe("efa0", sample(6*time.Minute, nil), 100)
	assert.Equal(t, health.Healthy, v.Grade)
}

func TestLinkBelowRate(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	s := sample(0, nil)
	s.RateGbps = 100
	v := tr.Observe("efa0", s, 200)
	assert.Equal(t, health.Degraded, v.Grade)
	assert.Equal(t, health.ReasonLinkBelowRate, v.Reason)
	assert.Equal(t, "link at 100 Gb/s, below the node's 200 Gb/s", v.Message)
	s.At, s.RateGbps = s.At.Add(10*time.Second), 200
	assert.Equal(t, health.Healthy, tr.Observe("efa0", s, 200).Grade)
	s.At, s.RateGbps = s.At.Add(10*time.Second), 0
	assert.Equal(t, health.Healthy, tr.Observe("efa0", s, 200).Grade, "an unknown rate is not low")
}

func TestDevicesApartAndRetain(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("a", sample(0, nil), 100)
	tr.Observe("b", sample(0, map[string]uint64{"unresponsive_remote_events": 50}), 100)
	assert.Equal(t, health.Degraded, tr.Observe("a", sample(10*time.Second, map[string]uint64{"unresponsive_remote_events": 10}), 100).Grade)
	assert.Equal(t, health.Healthy, tr.Observe("b", sample(10*time.Second, map[string]uint64{"unresponsive_remote_events": 55}), 100).Grade)
	tr.Retain(map[string]bool{"b": true})
	assert.Equal(t, health.Healthy, tr.Observe("a", sample(20*time.Second, map[string]uint64{"unresponsive_remote_events": 30}), 100).Grade,
		"a forgotten device starts again from its next sample")
}

func TestPolicyFlags(t *testing.T) {
	p := health.DefaultPolicy()
	require.NoError(t, p.SetLimit(health.RulePortFlaps, 0))
	assert.Equal(t, 0, p.FlapLimit)
	require.NoError(t, p.SetLimit(health.RuleImpairedConnections, 0))
	err := p.SetLimit("retransmits", 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "admin-timeouts, impaired-connections, port-flaps, retransmit-timeouts, unresponsive-remotes, work-request-errors")
	require.NoError(t, p.Validate())
	p.Window = 0
	assert.Error(t, p.Validate())

	// A limit of 0 turns its rule off.
	p = health.DefaultPolicy()
	require.NoError(t, p.SetLimit(health.RuleImpairedConnections, 0))
	tr := health.NewTracker(p)
	tr.Observe("efa0", sample(0, nil), 100)
	assert.Equal(t, health.Healthy, tr.Observe("efa0", sample(10*time.Second, map[string]uint64{"impaired_remote_conn_events": 1000}), 100).Grade)
}

// TestMessageSteadyWhileHeld: the message gives the count the rule fired
// at, not the window's count now, so that it changes only with the grade.
func TestMessageSteadyWhileHeld(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, nil), 100)
	first := tr.Observe("efa0", sample(10*time.Second, map[string]uint64{"impaired_remote_conn_events": 12}), 100)
	later := tr.Observe("efa0", sample(20*time.Second, map[string]uint64{"impaired_remote_conn_events": 40}), 100)
	assert.Equal(t, "12 impaired connections in 5m0s (limit 10)", first.Message)
	assert.Equal(t, first.Message, later.Message)
	assert.Equal(t, uint64(40), later.Counts[health.RuleImpairedConnections], "the counts are live")
}

func TestParseLimits(t *testing.T) {
	p := health.DefaultPolicy()
	assert.Equal(t, "admin-timeouts=1,impaired-connections=10,port-flaps=3,retransmit-timeouts=60,unresponsive-remotes=10,work-request-errors=10", p.Limits())
	require.NoError(t, p.ParseLimits(" retransmit-timeouts=5, port-flaps=0 ,"))
	assert.Equal(t, "admin-timeouts=1,impaired-connections=10,port-flaps=0,retransmit-timeouts=5,unresponsive-remotes=10,work-request-errors=10", p.Limits())
	for in, want := range map[string]string{
		"retransmit-timeouts":     "want rule=limit",
		"retransmit-timeouts=-1":  "not a count",
		"retransmit-timeouts=1.5": "not a count",
		"nope=1":                  `no health rule "nope"`,
	} {
		err := p.ParseLimits(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

// TestSamplesWithoutCounters: a sample whose counters were not read (a
// read that did not return in time, an EFA not yet read) is no baseline
// and no reset: the rules count over the samples that have them.
func TestSamplesWithoutCounters(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	none := sample(0, nil)
	none.Counters = nil
	assert.Equal(t, health.Healthy, tr.Observe("efa0", none, 100).Grade)
	tr.Observe("efa0", sample(10*time.Second, nil), 100)
	none.At = t0.Add(20 * time.Second)
	v := tr.Observe("efa0", none, 100)
	assert.Equal(t, health.Healthy, v.Grade)
	assert.Empty(t, v.Counts[health.RuleAdminTimeouts])
	v = tr.Observe("efa0", sample(30*time.Second, map[string]uint64{"no_completion_cmds": 1}), 100)
	assert.Equal(t, health.Unhealthy, v.Grade, "counted from the first sample with counters")
	none.At = t0.Add(40 * time.Second)
	assert.Equal(t, health.Unhealthy, tr.Observe("efa0", none, 100).Grade, "a missed read does not clear a rule")
}

// FuzzParseLimits: --health-limits and HEALTH_LIMITS come from whoever
// deploys the chart: any text is refused or taken, never a panic, and
// what is taken prints back (Limits) as a value that parses to the same.
func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{"", "retransmit-timeouts=120", "port-flaps=0,admin-timeouts=2", " , ", "x=1", "=", "a=b=c", "retransmit-timeouts=18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := health.DefaultPolicy()
		if err := p.ParseLimits(s); err != nil {
			return
		}
		q := health.DefaultPolicy()
		require.NoError(t, q.ParseLimits(p.Limits()))
		assert.Equal(t, p.Limits(), q.Limits())
	})
}

// TestCounterGapIsNoAdvance: a driver reload as the plugin reads it. The
// counter files are gone for one read (an empty map), then back at 0.
// The sample before the gap is no baseline for them: no advance of
// 2^64 - 3, no Unhealthy; what follows counts from the return.
func TestCounterGapIsNoAdvance(t *testing.T) {
	tr := health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, map[string]uint64{"no_completion_cmds": 3, "retrans_timeout_events": 500}), 100)
	gone := sample(10*time.Second, nil)
	gone.Counters = map[string]uint64{}
	v := tr.Observe("efa0", gone, 100)
	assert.Equal(t, health.Healthy, v.Grade, v.Message)
	assert.Empty(t, v.Counts[health.RuleAdminTimeouts], "no counter, no count")
	v = tr.Observe("efa0", sample(20*time.Second, map[string]uint64{"tx_pkts": 0}), 100)
	assert.Equal(t, health.Healthy, v.Grade, v.Message)
	assert.Equal(t, uint64(0), v.Counts[health.RuleAdminTimeouts])
	v = tr.Observe("efa0", sample(30*time.Second, map[string]uint64{"retrans_timeout_events": 61}), 100)
	assert.Equal(t, health.Degraded, v.Grade, "counted from the counters' return")
	assert.Equal(t, uint64(61), v.Counts[health.RuleRetransmitTimeouts])

	// One counter's read failed once; it comes back higher. Its run starts
	// again at its return (what it did in between is unknown); the others
	// count on.
	tr = health.NewTracker(health.DefaultPolicy())
	tr.Observe("efa0", sample(0, nil), 100)
	miss := sample(10*time.Second, map[string]uint64{"rdma_read_wr_err": 4, "unresponsive_remote_events": 6})
	delete(miss.Counters, "no_completion_cmds")
	tr.Observe("efa0", miss, 100)
	v = tr.Observe("efa0", sample(20*time.Second, map[string]uint64{"no_completion_cmds": 5, "rdma_read_wr_err": 4, "unresponsive_remote_events": 10}), 100)
	assert.Equal(t, health.Degraded, v.Grade, v.Message)
	assert.Equal(t, uint64(0), v.Counts[health.RuleAdminTimeouts], "5 after a gap is no advance")
	assert.Equal(t, uint64(10), v.Counts[health.RuleUnresponsiveRemotes])
	assert.Equal(t, uint64(4), v.Counts[health.RuleWorkRequestErrors])
}
