package cluster

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// Pod start under load, through the real node: a node filling at once
// (every pod of a burst created within a moment, as a Job or a
// LeaderWorkerSet does), measured from each create call to the API
// showing the pod Running, beside the same burst of pods without claims
// (the runtime's floor on this machine), the two interleaved round by
// round so that the machine's load falls on both alike. The test client
// is unthrottled (client-go's default limiter would pace the creates and
// the watch at 5 requests a second); the scheduler, the controller
// manager and the kubelet run at their default client rates.
//
// Where the time goes, per pod, from the API (the pod's watch events) and
// the components' logs (klog timestamps, one clock):
//   - control plane: create to bound (claim made from its template,
//     allocation, binding);
//   - kubelet: bound to the kubelet's "SyncLoop ADD" (its watch), and ADD
//     to the plugin's call arriving (the pod worker, the DRA manager's
//     claim read);
//   - helper: the call's arrival to the plugin's start on it (the
//     kubelet-plugin helper reads the claim, then waits for the calls
//     before it: it serializes them);
//   - plugin: efakit's prepare (sysfs, CDI spec, checkpoint save);
//   - runtime: the plugin's answer to Running (sandbox, CNI, container with
//     its CDI devices, the kubelet's status update).
//
// It prints the percentiles; it asserts nothing about them (a shared
// machine's timing is no test).

// burstRounds is how many bursts of each kind TestRealNodePodStart runs:
// EFAKIT_BURST_ROUNDS (make burst runs six: the percentiles need the
// rounds' spread), 0 where it is not set. test/e2e's TestRealNodeBursts
// runs one round of the same bursts and asserts that every pod runs and
// is cleaned up.
func burstRounds() int {
	if n, err := strconv.Atoi(os.Getenv("EFAKIT_BURST_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 0
}

// The fixtures the bursts run on.
var (
	p5Fixture   = harness.Fixture("p5.48xlarge")
	trn2Fixture = harness.Fixture("trn2.48xlarge")
)

// percentiles are a sample's p50, p90 and p99 (nearest rank) and its
// count.
type percentiles struct {
	n             int
	p50, p90, p99 time.Duration
}

func percentilesOf(ds []time.Duration) percentiles {
	if len(ds) == 0 {
		return percentiles{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration { return s[int(math.Ceil(p*float64(len(s))))-1] }
	return percentiles{n: len(s), p50: rank(0.50), p90: rank(0.90), p99: rank(0.99)}
}

func (p percentiles) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	return fmt.Sprintf("p50 %s s  p90 %s s  p99 %s s  (n=%d)", ms(p.p50), ms(p.p90), ms(p.p99), p.n)
}

// step is one segment of a pod's start.
type step struct {
	name     string
	from, to func(*harness.PodTimes) time.Time
}

func between(all []map[string]*harness.PodTimes, s step) []time.Duration {
	var out []time.Duration
	for _, m := range all {
		for _, pt := range m {
			a, b := s.from(pt), s.to(pt)
			if !a.IsZero() && !b.IsZero() {
				out = append(out, b.Sub(a))
			}
		}
	}
	return out
}

var (
	startSteps = []step{
		{"total: created to Running", func(p *harness.PodTimes) time.Time { return p.Created }, func(p *harness.PodTimes) time.Time { return p.Running }},
		{"control plane: created to bound", func(p *harness.PodTimes) time.Time { return p.Created }, func(p *harness.PodTimes) time.Time { return p.Bound }},
		{"kubelet: bound to SyncLoop ADD", func(p *harness.PodTimes) time.Time { return p.Bound }, func(p *harness.PodTimes) time.Time { return p.Kubelet }},
		{"node: SyncLoop ADD to Running", func(p *harness.PodTimes) time.Time { return p.Kubelet }, func(p *harness.PodTimes) time.Time { return p.Running }},
	}
	controlSteps = []step{
		{"  controller manager: claim made", func(p *harness.PodTimes) time.Time { return p.Created }, func(p *harness.PodTimes) time.Time { return p.ClaimMade }},
		{"  scheduler: claim made to allocated", func(p *harness.PodTimes) time.Time { return p.ClaimMade }, func(p *harness.PodTimes) time.Time { return p.Allocated }},
		{"  scheduler: allocated to bound", func(p *harness.PodTimes) time.Time { return p.Allocated }, func(p *harness.PodTimes) time.Time { return p.Bound }},
	}
	prepareSteps = []step{
		{"  kubelet: ADD to the plugin's call", func(p *harness.PodTimes) time.Time { return p.Kubelet }, func(p *harness.PodTimes) time.Time { return p.Arrived }},
		{"  helper: claim read, calls before it", func(p *harness.PodTimes) time.Time { return p.Arrived }, func(p *harness.PodTimes) time.Time { return p.Started }},
		{"  plugin: efakit's prepare", func(p *harness.PodTimes) time.Time { return p.Started }, func(p *harness.PodTimes) time.Time { return p.Prepared }},
		{"  runtime: prepared to Running", func(p *harness.PodTimes) time.Time { return p.Prepared }, func(p *harness.PodTimes) time.Time { return p.Running }},
	}
)

// podStart runs rounds of a burst of size pods with the claims claimsOf
// gives pod i, each round beside the same burst without claims (which of
// the two goes first alternates), and prints the percentiles of each and
// where the time went.
func podStart(t *testing.T, n *harness.RealNode, name string, size, rounds int, claimsOf func(i int) []corev1.PodResourceClaim) {
	t.Helper()
	client := n.CP.FastClient(t)
	var floor, claims []map[string]*harness.PodTimes
	run := func(kind string, r int, withClaims bool) map[string]*harness.PodTimes {
		burst := fmt.Sprintf("%s-%s-%d", name, kind, r)
		var pods []*corev1.Pod
		for i := range size {
			var pcs []corev1.PodResourceClaim
			if withClaims {
				pcs = claimsOf(i)
			}
			pods = append(pods, n.SleeperPod(fmt.Sprintf("%s-%d", burst, i), burst, pcs...))
		}
		return n.Burst(t, client, pods)
	}
	for r := range rounds {
		if r%2 == 0 {
			floor = append(floor, run("floor", r, false))
			claims = append(claims, run("claims", r, true))
		} else {
			claims = append(claims, run("claims", r, true))
			floor = append(floor, run("floor", r, false))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod start, %s: %d rounds of %d pods created at once, with claims and without (the floor), interleaved:\n", name, rounds, size)
	both := func(s step) {
		fmt.Fprintf(&b, "  %-40s floor   %s\n", s.name, percentilesOf(between(floor, s)))
		fmt.Fprintf(&b, "  %-40s claims  %s\n", "", percentilesOf(between(claims, s)))
	}
	only := func(ss []step) {
		for _, s := range ss {
			fmt.Fprintf(&b, "  %-40s claims  %s\n", s.name, percentilesOf(between(claims, s)))
		}
	}
	both(startSteps[0])
	both(startSteps[1])
	only(controlSteps)
	both(startSteps[2])
	both(startSteps[3])
	only(prepareSteps)
	// Round by round (the two bursts of a round ran one after the other):
	// what the claims added to the floor's p50 and p99.
	var add50, add99 []time.Duration
	for r := range rounds {
		f := percentilesOf(between(floor[r:r+1], startSteps[0]))
		c := percentilesOf(between(claims[r:r+1], startSteps[0]))
		add50, add99 = append(add50, c.p50-f.p50), append(add99, c.p99-f.p99)
		fmt.Fprintf(&b, "  round %d: floor p50 %.2f s p99 %.2f s, claims p50 %.2f s p99 %.2f s\n", r, f.p50.Seconds(), f.p99.Seconds(), c.p50.Seconds(), c.p99.Seconds())
	}
	spread := func(ds []time.Duration) string {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return fmt.Sprintf("median %+.2f s (%+.2f to %+.2f)", s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
	}
	fmt.Fprintf(&b, "  claims add to the floor's p50: %s; to its p99: %s, over %d rounds", spread(add50), spread(add99), rounds)
	t.Log(b.String())
}

// burstRates are the plugin's API client rates the pod-start test runs
// under: EFAKIT_BURST_RATES ("5/10,50/100": QPS/burst pairs), the chart's
// default alone when unset.
func burstRates(t *testing.T) [][2]string {
	v := os.Getenv("EFAKIT_BURST_RATES")
	if v == "" {
		return [][2]string{{"", ""}}
	}
	var out [][2]string
	for _, r := range strings.Split(v, ",") {
		q, b, ok := strings.Cut(r, "/")
		require.True(t, ok, "EFAKIT_BURST_RATES: %q is not QPS/burst", r)
		out = append(out, [2]string{q, b})
	}
	return out
}

// burstClaimStatus says whether the pod-start test runs the plugin with
// claim status writes (true), without (false), or both:
// EFAKIT_BURST_CLAIM_STATUS ("on,off"), on alone when unset.
func burstClaimStatus(t *testing.T) []bool {
	v := os.Getenv("EFAKIT_BURST_CLAIM_STATUS")
	if v == "" {
		return []bool{true}
	}
	var out []bool
	for _, s := range strings.Split(v, ",") {
		require.Contains(t, []string{"on", "off"}, s, "EFAKIT_BURST_CLAIM_STATUS: on, off or both")
		out = append(out, s == "on")
	}
	return out
}

// burstContender runs the p5 bursts with the plugin started with the
// chart's values.
func burstContender(t *testing.T, n *harness.RealNode, name string, values []string, single func(int) []corev1.PodResourceClaim) {
	t.Run(name, func(t *testing.T) {
		n.StartEFAKit(p5Fixture, values...)
		defer n.KillEFAKit(syscall.SIGTERM)
		n.WaitEFAs(t, 32)
		t.Run("burst-32-single-efa", func(t *testing.T) { podStart(t, n, "single", 32, burstRounds(), single) })
		t.Run("burst-8-gpu-with-efas", func(t *testing.T) {
			podStart(t, n, "gpu", 8, burstRounds(), func(int) []corev1.PodResourceClaim {
				return []corev1.PodResourceClaim{harness.TemplateClaim("c", "efakit-gpu-with-efas")}
			})
		})
		t.Run("one-by-one", func(t *testing.T) { podStart(t, n, "one", 1, 2*burstRounds(), single) })
	})
}

// TestRealNodePodStart: pods start on a p5 node filling at once (32
// single-EFA pods; 8 pods each with a GPU and its 4 EFAs) and one after
// another, and on a trn2 node (16 single-EFA pods), each beside the same
// pods without claims; see podStart. make burst runs it, with
// EFAKIT_BURST_ROUNDS rounds.
func TestRealNodePodStart(t *testing.T) {
	if burstRounds() == 0 {
		t.Skip("set EFAKIT_BURST_ROUNDS (make burst)")
	}
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	single := func(int) []corev1.PodResourceClaim {
		return []corev1.PodResourceClaim{harness.TemplateClaim("efa", "single-efa-claim")}
	}
	t.Run("p5.48xlarge", func(t *testing.T) {
		n := harness.StartRealNode(t, c)
		n.EnsureNamespace()
		require.Len(t, n.StartAccelDriver(p5Fixture), 8)
		harness.CreateSeed(t, c, "seed-claims.yaml")
		harness.CreateTemplates(t, c, p5Fixture, resources.GroupsNone, "efakit-")
		for _, rate := range burstRates(t) {
			for _, status := range burstClaimStatus(t) {
				name, values := "chart-default", []string(nil)
				if rate[0] != "" {
					name, values = "qps-"+rate[0]+"-burst-"+rate[1], []string{"--set", "kubeAPI.qps=" + rate[0], "--set", "kubeAPI.burst=" + rate[1]}
				}
				if !status {
					name, values = name+"-no-claim-status", append(values, "--set", "claimStatus.write=false")
				}
				burstContender(t, n, name, values, single)
			}
		}
	})
	t.Run("trn2.48xlarge", func(t *testing.T) {
		n := harness.StartRealNode(t, c)
		n.EnsureNamespace()
		require.NotEmpty(t, n.StartAccelDriver(trn2Fixture))
		harness.CreateSeed(t, c, "seed-claims.yaml")
		n.StartEFAKit(trn2Fixture)
		defer n.KillEFAKit(syscall.SIGTERM)
		n.WaitEFAs(t, 16)
		t.Run("burst-16-single-efa", func(t *testing.T) { podStart(t, n, "trn2", 16, burstRounds(), single) })
	})
}
