package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/efakit/efakit/plugin/driver/resources"
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

// burstRounds is how many bursts of each kind a test runs:
// EFAKIT_BURST_ROUNDS, 1 by default. make e2e runs one: the test asserts
// that every pod of a burst runs with its EFAs and is cleaned up, which
// one round shows; make burst runs six for the percentiles, which need
// the rounds' spread.
func burstRounds() int {
	if n, err := strconv.Atoi(os.Getenv("EFAKIT_BURST_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// fastClient is a client of the control plane without client-go's rate
// limiter.
func (c *controlPlane) fastClient(t *testing.T) kubernetes.Interface {
	cfg := rest.CopyConfig(c.config)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// podTimes is when one pod of a burst passed each step.
type podTimes struct {
	created, bound, running time.Time
	// For a pod with a claim made from a template: when the claim was
	// seen made (the controller manager) and allocated (the scheduler).
	claimMade, allocated time.Time
	// From the logs: the kubelet's SyncLoop ADD, and for a pod with a
	// claim the plugin's call arriving, its start and its answer.
	kubelet, arrived, started, prepared time.Time
}

// sleeperPod is a pod on the node that sleeps, with the given claims.
func (n *realNode) sleeperPod(name, burst string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	pod := n.printerPod(name, claims...)
	pod.Labels = map[string]string{"burst": burst}
	// Ends at once on SIGTERM (a shell as PID 1 without a trap ignores
	// it, and the kubelet waits out the grace period).
	pod.Spec.Containers[0].Command = []string{"sh", "-c", `trap "exit 0" TERM; sleep 100000 & wait`}
	return pod
}

// burst creates the pods at once (one goroutine each) and waits until all
// run, then deletes them and waits until they are gone, their claims
// unprepared and deleted. It returns each pod's times, by pod name.
func (n *realNode) burst(t *testing.T, client kubernetes.Interface, pods []*corev1.Pod) map[string]*podTimes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	burst := pods[0].Labels["burst"]
	var mu sync.Mutex
	times := map[string]*podTimes{}
	for _, p := range pods {
		times[p.Name] = &podTimes{}
	}
	running := 0
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		pt := times[p.Name]
		if pt == nil {
			return
		}
		if p.Spec.NodeName != "" && pt.bound.IsZero() {
			pt.bound = now
		}
		if p.Status.Phase == corev1.PodRunning && pt.running.IsZero() {
			pt.running = now
			running++
		}
	}
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", nodeNS, func(o *metav1.ListOptions) {
		o.LabelSelector = "burst=" + burst
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }})
	require.NoError(t, err)
	go inf.Run(ctx.Done())
	// Claims by their owner's UID, not its name: the claims of an earlier
	// burst's pods of the same name may still be on their way out.
	type claimSeen struct{ made, allocated time.Time }
	seen := map[types.UID]*claimSeen{}
	observeClaim := func(obj any) {
		c, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, o := range c.OwnerReferences {
			if o.Kind != "Pod" || !strings.HasPrefix(o.Name, burst+"-") {
				continue
			}
			cs := seen[o.UID]
			if cs == nil {
				cs = &claimSeen{made: now}
				seen[o.UID] = cs
			}
			if c.Status.Allocation != nil && cs.allocated.IsZero() {
				cs.allocated = now
			}
		}
	}
	claimInf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(client.ResourceV1().RESTClient(), "resourceclaims", nodeNS, fields.Everything()),
		&resourceapi.ResourceClaim{}, 0, cache.Indexers{})
	_, err = claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observeClaim, UpdateFunc: func(_, o any) { observeClaim(o) }})
	require.NoError(t, err)
	go claimInf.Run(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, claimInf.HasSynced))

	logStart := time.Now()
	uids := map[types.UID]string{}
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			made, err := client.CoreV1().Pods(nodeNS).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			times[p.Name].created = at
			uids[made.UID] = p.Name
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		done := running
		mu.Unlock()
		if done == len(pods) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("burst %s: %d of %d pods running after 3 minutes\nkubelet:\n%s\nplugin:\n%s", burst, done, len(pods),
				n.logTail("kubelet", 4000), n.logTail("efakit-plugin", 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	for uid, cs := range seen {
		if name, ok := uids[uid]; ok {
			times[name].claimMade, times[name].allocated = cs.made, cs.allocated
		}
	}
	mu.Unlock()
	claims := n.claimOwners(t, client, burst)
	n.stepsFromLogs(t, logStart, times, claims)
	n.endBurst(t, client, burst)
	return times
}

// claimOwners maps the claims of a burst's pods (made from templates) to
// their pods.
func (n *realNode) claimOwners(t *testing.T, client kubernetes.Interface, burst string) map[string]string {
	l, err := client.CoreV1().Pods(nodeNS).List(context.Background(), metav1.ListOptions{LabelSelector: "burst=" + burst})
	require.NoError(t, err)
	out := map[string]string{}
	for _, p := range l.Items {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				out[*s.ResourceClaimName] = p.Name
			}
		}
	}
	return out
}

// endBurst deletes a burst's pods at once and waits until they are gone,
// the plugin has unprepared their claims (no dra.net spec left in the CDI
// directory) and the claim controller has deleted them: the next burst
// finds the node empty.
func (n *realNode) endBurst(t *testing.T, client kubernetes.Interface, burst string) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	require.NoError(t, client.CoreV1().Pods(nodeNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "burst=" + burst}))
	var left string
	ended := func() bool {
		l, err := client.CoreV1().Pods(nodeNS).List(ctx, metav1.ListOptions{LabelSelector: "burst=" + burst})
		if err != nil || len(l.Items) > 0 {
			left = fmt.Sprintf("pods: %d %v", len(l.Items), err)
			return false
		}
		if specs, _ := filepath.Glob(filepath.Join(n.cdi, "dra.net-*")); len(specs) > 0 {
			left = fmt.Sprintf("specs: %v", specs)
			return false
		}
		cl, err := client.ResourceV1().ResourceClaims(nodeNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			left = err.Error()
			return false
		}
		for _, c := range cl.Items {
			for _, o := range c.OwnerReferences {
				if o.Kind == "Pod" && strings.HasPrefix(o.Name, burst+"-") && c.Status.Allocation != nil {
					left = fmt.Sprintf("claim %s allocated, reserved for %v, deleting %v", c.Name, c.Status.ReservedFor, c.DeletionTimestamp)
					return false
				}
			}
		}
		// The pods are gone from the API at once (grace period 0); the
		// kubelet stops their containers and sandboxes after. The next
		// burst starts on a quiet node.
		if ids := n.runtimeContainers(t, burst+"-"); len(ids) > 0 {
			left = fmt.Sprintf("%d containers and sandboxes running in containerd", len(ids))
			return false
		}
		return true
	}
	for deadline := time.Now().Add(3 * time.Minute); !ended(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("burst %s not ended after 3 minutes (pods gone, claims unprepared and deallocated): left %s", burst, left)
		}
	}
}

// klogLine is a klog header and its message: I1201 20:44:11.123456 ...] msg
var klogLine = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})\s+\d+ [^\]]+\] (.*)$`)

// klogTime is a klog header's time, in this year and the local zone (klog
// writes local time).
func klogTime(m []string) time.Time {
	num := func(s string) int { v, _ := strconv.Atoi(s); return v }
	now := time.Now()
	return time.Date(now.Year(), time.Month(num(m[1])), num(m[2]), num(m[3]), num(m[4]), num(m[5]), num(m[6])*1000, time.Local)
}

var (
	kubeletAdd  = regexp.MustCompile(`^"SyncLoop ADD" source="api" pods=\["` + nodeNS + `/([^"]+)"\]`)
	pluginReady = regexp.MustCompile(`^"Prepared claim" .*?\bclaim="` + nodeNS + `/([^"]+)".* duration="([^"]+)" waited="([^"]+)"`)
)

// stepsFromLogs fills in, from the kubelet's and the plugin's logs since
// from, when the kubelet saw each pod and when the plugin's call for each
// claim arrived, started and answered.
func (n *realNode) stepsFromLogs(t *testing.T, from time.Time, times map[string]*podTimes, claimPod map[string]string) {
	scan := func(name string, line func(at time.Time, msg string)) {
		f, err := os.Open(filepath.Join(n.dir, name+".log"))
		require.NoError(t, err)
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := klogLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			if at := klogTime(m); !at.Before(from.Add(-time.Second)) {
				line(at, m[7])
			}
		}
	}
	scan("kubelet", func(at time.Time, msg string) {
		if m := kubeletAdd.FindStringSubmatch(msg); m != nil {
			if pt := times[m[1]]; pt != nil && pt.kubelet.IsZero() {
				pt.kubelet = at
			}
		}
	})
	scan("efakit-plugin", func(at time.Time, msg string) {
		m := pluginReady.FindStringSubmatch(msg)
		if m == nil {
			return
		}
		pt := times[claimPod[m[1]]]
		if pt == nil || !pt.prepared.IsZero() {
			return
		}
		took, err1 := time.ParseDuration(m[2])
		waited, err2 := time.ParseDuration(m[3])
		if err1 != nil || err2 != nil {
			return
		}
		pt.prepared = at
		pt.started = at.Add(-took)
		pt.arrived = pt.started.Add(-waited)
	})
}

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
	from, to func(*podTimes) time.Time
}

func between(all []map[string]*podTimes, s step) []time.Duration {
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
		{"total: created to Running", func(p *podTimes) time.Time { return p.created }, func(p *podTimes) time.Time { return p.running }},
		{"control plane: created to bound", func(p *podTimes) time.Time { return p.created }, func(p *podTimes) time.Time { return p.bound }},
		{"kubelet: bound to SyncLoop ADD", func(p *podTimes) time.Time { return p.bound }, func(p *podTimes) time.Time { return p.kubelet }},
		{"node: SyncLoop ADD to Running", func(p *podTimes) time.Time { return p.kubelet }, func(p *podTimes) time.Time { return p.running }},
	}
	controlSteps = []step{
		{"  controller manager: claim made", func(p *podTimes) time.Time { return p.created }, func(p *podTimes) time.Time { return p.claimMade }},
		{"  scheduler: claim made to allocated", func(p *podTimes) time.Time { return p.claimMade }, func(p *podTimes) time.Time { return p.allocated }},
		{"  scheduler: allocated to bound", func(p *podTimes) time.Time { return p.allocated }, func(p *podTimes) time.Time { return p.bound }},
	}
	prepareSteps = []step{
		{"  kubelet: ADD to the plugin's call", func(p *podTimes) time.Time { return p.kubelet }, func(p *podTimes) time.Time { return p.arrived }},
		{"  helper: claim read, calls before it", func(p *podTimes) time.Time { return p.arrived }, func(p *podTimes) time.Time { return p.started }},
		{"  plugin: efakit's prepare", func(p *podTimes) time.Time { return p.started }, func(p *podTimes) time.Time { return p.prepared }},
		{"  runtime: prepared to Running", func(p *podTimes) time.Time { return p.prepared }, func(p *podTimes) time.Time { return p.running }},
	}
)

// podStart runs rounds of a burst of size pods with the claims claimsOf
// gives pod i, each round beside the same burst without claims (which of
// the two goes first alternates), and prints the percentiles of each and
// where the time went.
func (n *realNode) podStart(t *testing.T, name string, size, rounds int, claimsOf func(i int) []corev1.PodResourceClaim) {
	t.Helper()
	client := n.c.fastClient(t)
	var floor, claims []map[string]*podTimes
	run := func(kind string, r int, withClaims bool) map[string]*podTimes {
		burst := fmt.Sprintf("%s-%s-%d", name, kind, r)
		var pods []*corev1.Pod
		for i := range size {
			var pcs []corev1.PodResourceClaim
			if withClaims {
				pcs = claimsOf(i)
			}
			pods = append(pods, n.sleeperPod(fmt.Sprintf("%s-%d", burst, i), burst, pcs...))
		}
		return n.burst(t, client, pods)
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
func burstContender(t *testing.T, n *realNode, name string, values []string, single func(int) []corev1.PodResourceClaim) {
	t.Run(name, func(t *testing.T) {
		n.startEFAKit(p5Fixture, values...)
		defer n.killEFAKit(syscall.SIGTERM)
		n.waitEFAs(t, 32)
		t.Run("burst-32-single-efa", func(t *testing.T) { n.podStart(t, "single", 32, burstRounds(), single) })
		t.Run("burst-8-gpu-with-efas", func(t *testing.T) {
			n.podStart(t, "gpu", 8, burstRounds(), func(int) []corev1.PodResourceClaim {
				return []corev1.PodResourceClaim{templateClaim("c", "efakit-gpu-with-efas")}
			})
		})
		t.Run("one-by-one", func(t *testing.T) { n.podStart(t, "one", 1, 2*burstRounds(), single) })
	})
}

// TestRealNodePodStart: pods start on a p5 node filling at once (32
// single-EFA pods; 8 pods each with a GPU and its 4 EFAs) and one after
// another, and on a trn2 node (16 single-EFA pods), each beside the same
// pods without claims; see podStart. make burst runs more rounds.
func TestRealNodePodStart(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	single := func(int) []corev1.PodResourceClaim {
		return []corev1.PodResourceClaim{templateClaim("efa", "single-efa-claim")}
	}
	t.Run("p5.48xlarge", func(t *testing.T) {
		n := startRealNode(t, c)
		n.ensureNamespace()
		require.Len(t, n.startAccelDriver(p5Fixture), 8)
		createSeed(t, c, "seed-claims.yaml")
		createTemplates(t, c, p5Fixture, resources.GroupsNone, "efakit-")
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
		n := startRealNode(t, c)
		n.ensureNamespace()
		require.NotEmpty(t, n.startAccelDriver(trn2Fixture))
		createSeed(t, c, "seed-claims.yaml")
		n.startEFAKit(trn2Fixture)
		defer n.killEFAKit(syscall.SIGTERM)
		n.waitEFAs(t, 16)
		t.Run("burst-16-single-efa", func(t *testing.T) { n.podStart(t, "trn2", 16, burstRounds(), single) })
	})
}

// runtimeContainers lists containerd's containers (sandboxes included) of
// the pods whose names start with prefix that still have a task (a
// process): stopped ones stay listed until the kubelet's garbage
// collection removes them.
func (n *realNode) runtimeContainers(t *testing.T, prefix string) []string {
	out, err := exec.Command(n.bins.ctr, "--address", n.sock, "-n", "k8s.io", "containers", "ls", "--quiet",
		`labels."io.kubernetes.pod.name"~="^`+regexp.QuoteMeta(prefix)+`"`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tasks, err := exec.Command(n.bins.ctr, "--address", n.sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	require.NoError(t, err, "%s", tasks)
	live := map[string]bool{}
	for _, l := range strings.Split(string(tasks), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] != "TASK" && f[2] != "STOPPED" {
			live[f[0]] = true
		}
	}
	var ids []string
	for _, id := range strings.Fields(string(out)) {
		if live[id] {
			ids = append(ids, id)
		}
	}
	return ids
}
