package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/efakit/efakit/test/e2e/harness"
)

// The fleet harness: the real kube-apiserver, kube-scheduler and
// kube-controller-manager (test/e2e/k8s), plain Node objects without a
// kubelet (as kube-scheduler's scheduler_perf runs them), each with the
// slices a shape (scale_shapes_test.go) publishes for it, and bursts of
// pods with the shape's claims, then churn. Each shape runs on a control
// plane of its own, started for it, so that its memory and etcd size are
// its own; the shapes take turns, in an order that rotates every round,
// so that a machine's drift falls on all of them alike.
//
// TestScaleSmoke runs in make test; TestScale runs what the environment
// asks (make scale):
//
//	EFAKIT_SCALE_NODES   node counts, comma-separated (500,2000,5000)
//	EFAKIT_SCALE_ROUNDS  rounds of every shape (3)
//	EFAKIT_SCALE_PODS    pods in one burst (500)
//	EFAKIT_SCALE_MIX     fleet mix by instance type and weight (p5.48xlarge=1)
//	EFAKIT_SCALE_SHAPES  shapes (efakit,efakit-mixed,dranet,upstream,plain)
//	EFAKIT_SCALE_CHURN   after the burst: duration@pods-per-second (60s@5; 0 for none)
//	EFAKIT_SCALE_SINGLES the share of pods (0 to 1) that take one EFA, not an accelerator with
//	                     its EFAs, in the efakit shapes (0): what each group mode cannot serve
//	EFAKIT_SCALE_SCHEDULER_RATE  kube-scheduler's client QPS/burst values, comma-separated ("" or
//	                             "default" for its own, 50/100)
//	EFAKIT_SCALE_NODES_TO_SCORE  percentageOfNodesToScore values, comma-separated (0 for the
//	                             scheduler's adaptive default)
//
// Every shape runs with every rate and percentage asked for, each a
// contender of its own ("efakit@10%", "efakit@q200"), compared with the
// shape at the scheduler's defaults, which should be among them.
//
//	EFAKIT_SCALE_PPROF   a directory: a CPU profile of the scheduler in each burst
//	EFAKIT_SCALE_OUT     a file: every run's figures as JSON lines
type scaleSettings struct {
	nodes     []int
	rounds    int
	pods      int
	mix       fleetMix
	shapes    []*shape
	churn     time.Duration
	churnRate float64
	singles   float64  // the share of pods that take one EFA (efakit shapes)
	rates     []string // the scheduler's client QPS/burst; "" is its default
	scores    []int    // percentageOfNodesToScore values; 0 is the scheduler's adaptive default
	pprof     string
	out       string
}

func scaleSettingsFromEnv(t *testing.T, def scaleSettings, defMix, defShapes string) scaleSettings {
	t.Helper()
	s := def
	env := func(k string) (string, bool) { v := os.Getenv(k); return v, v != "" }
	if v, ok := env("EFAKIT_SCALE_NODES"); ok {
		s.nodes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "EFAKIT_SCALE_NODES")
			s.nodes = append(s.nodes, n)
		}
	}
	for k, p := range map[string]*int{"EFAKIT_SCALE_ROUNDS": &s.rounds, "EFAKIT_SCALE_PODS": &s.pods} {
		if v, ok := env(k); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, k)
			*p = n
		}
	}
	mix := defMix
	if v, ok := env("EFAKIT_SCALE_MIX"); ok {
		mix = v
	}
	var err error
	s.mix, err = parseMix(mix)
	require.NoError(t, err)
	shapes := defShapes
	if v, ok := env("EFAKIT_SCALE_SHAPES"); ok {
		shapes = v
	}
	s.shapes = nil
	for _, name := range strings.Split(shapes, ",") {
		sh, err := shapeByName(strings.TrimSpace(name))
		require.NoError(t, err)
		s.shapes = append(s.shapes, sh)
	}
	if v, ok := env("EFAKIT_SCALE_CHURN"); ok {
		s.churn, s.churnRate = 0, 0
		if v != "0" {
			d, r, ok := strings.Cut(v, "@")
			require.True(t, ok, "EFAKIT_SCALE_CHURN is duration@rate")
			s.churn, err = time.ParseDuration(d)
			require.NoError(t, err)
			s.churnRate, err = strconv.ParseFloat(r, 64)
			require.NoError(t, err)
		}
	}
	if v, ok := env("EFAKIT_SCALE_SCHEDULER_RATE"); ok {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" || f == "default" {
				s.rates = append(s.rates, "")
				continue
			}
			q, b, ok := strings.Cut(f, "/")
			require.True(t, ok, "EFAKIT_SCALE_SCHEDULER_RATE is QPS/burst, comma-separated")
			_, err1 := strconv.ParseFloat(q, 32)
			_, err2 := strconv.Atoi(b)
			require.NoError(t, errors.Join(err1, err2), "EFAKIT_SCALE_SCHEDULER_RATE is QPS/burst, comma-separated")
			s.rates = append(s.rates, f)
		}
	}
	if v, ok := env("EFAKIT_SCALE_NODES_TO_SCORE"); ok {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "EFAKIT_SCALE_NODES_TO_SCORE")
			require.True(t, n >= 0 && n <= 100, "EFAKIT_SCALE_NODES_TO_SCORE: a percentage, 0 for the default")
			s.scores = append(s.scores, n)
		}
	}
	if v, ok := env("EFAKIT_SCALE_SINGLES"); ok {
		s.singles, err = strconv.ParseFloat(v, 64)
		require.NoError(t, err, "EFAKIT_SCALE_SINGLES")
		require.True(t, s.singles >= 0 && s.singles <= 1, "EFAKIT_SCALE_SINGLES: a share from 0 to 1")
	}
	s.pprof, _ = env("EFAKIT_SCALE_PPROF")
	s.out, _ = env("EFAKIT_SCALE_OUT")
	return s
}

// TestScaleSmoke is the harness at a size make test affords: every shape
// once on 12 nodes of a mixed fleet, a burst and a few seconds of churn.
// It checks what the harness measures can be trusted: every pod bound,
// every claim allocated as its constraint says (the devices that share
// the attribute it names, as the slices published them), and the figures
// read (CPU, memory, etcd, the scheduler's metrics).
func TestScaleSmoke(t *testing.T) {
	if os.Getenv("EFAKIT_SCALE_NODES") != "" {
		t.Skip("TestScale runs the sizes asked for")
	}
	s := scaleSettingsFromEnv(t, scaleSettings{nodes: []int{12}, rounds: 1, pods: 24, churn: 3 * time.Second, churnRate: 4},
		"p5.48xlarge=1,p5en.48xlarge=1,p6-b200.48xlarge=1,trn2.48xlarge=1", "efakit,efakit-exclusive,efakit-mixed,dranet,upstream,plain")
	results := runScale(t, s, true)
	require.Len(t, results, len(s.shapes))
	// The scheduler from a configuration file (percentageOfNodesToScore,
	// the client's rate), as make scale's contenders "efakit@q100@50%" run it.
	// Below 100 nodes the percentage changes nothing; the file must still
	// be one kube-scheduler takes.
	efakit, err := shapeByName("efakit")
	require.NoError(t, err)
	r := runScaleOnce(t, s, newContender(efakit, "100/200", 50), s.nodes[0], 0, true)
	t.Logf("%s: %.2f pods/s, scheduler %.1f ms/pod", r.Shape, r.PodsPerSecond, r.SchedulerCPUms)
	results = append(results, r)
	// A quarter of the pods take one EFA: the default mode serves them,
	// exclusive mode (groups only) leaves them pending, with the
	// scheduler's reason.
	mix := s
	mix.singles = 0.25
	mix.shapes = nil
	for _, name := range []string{"efakit", "efakit-exclusive"} {
		sh, err := shapeByName(name)
		require.NoError(t, err)
		mix.shapes = append(mix.shapes, sh)
	}
	for _, r := range runScale(t, mix, true) {
		assert.Equal(t, 6, r.Singles, "%s: a quarter of 24 pods take one EFA", r.Shape)
		switch r.Shape {
		case "efakit":
			assert.Equal(t, mix.pods, r.Bound, "the default mode serves single EFAs beside GPUs with theirs")
			assert.Zero(t, r.Unserved)
		case "efakit-exclusive":
			assert.Equal(t, 6, r.Unserved, "exclusive mode publishes no single EFA")
			assert.Equal(t, mix.pods-6, r.Bound)
			assert.Contains(t, r.UnservedReason, "cannot allocate all claims")
			assert.Positive(t, r.ExplainSeconds, "efakit explain ran on a pending pod")
			assert.Positive(t, r.ExplainRSS)
		}
	}
	for _, r := range results {
		assert.Equal(t, s.pods, r.Bound, "%s: every pod of the burst bound", r.Shape)
		assert.Positive(t, r.SchedulerCPUms, "%s: the scheduler's CPU read", r.Shape)
		assert.Positive(t, r.APIServerRSS, "%s: the API server's memory read", r.Shape)
		assert.Positive(t, r.EtcdBytes, "%s: etcd's size read", r.Shape)
		assert.Positive(t, r.ChurnPods, "%s: churn ran", r.Shape)
		if r.Shape != "plain" {
			assert.Positive(t, r.SliceBytesPerNode, "%s: slices published", r.Shape)
		}
	}
}

// TestScale is make scale: the sizes, rounds and shapes of the
// environment, with a table of each size's figures and ratios.
func TestScale(t *testing.T) {
	if os.Getenv("EFAKIT_SCALE_NODES") == "" {
		t.Skip("set EFAKIT_SCALE_NODES (make scale)")
	}
	s := scaleSettingsFromEnv(t, scaleSettings{rounds: 3, pods: 500, churn: 60 * time.Second, churnRate: 5},
		"p5.48xlarge=1", "efakit,efakit-exclusive,efakit-mixed,dranet,upstream,plain")
	runScale(t, s, false)
}

// scaleResult is one shape's run at one size.
type scaleResult struct {
	Shape, Mix         string // Shape: the contender ("efakit", "efakit@10%")
	NodesToScore       int    `json:",omitempty"` // percentageOfNodesToScore, 0 for the default
	SchedulerRate      string `json:",omitempty"` // the scheduler's client QPS/burst, "" for its default
	Nodes, Round       int
	Pods, Bound        int
	PodsPerSecond      float64
	P50, P99           float64 // creation to binding, seconds
	SchedulerCPUms     float64 // per pod bound
	FilterPerNodeUs    float64 // DynamicResources Filter per node, mean of the sampled cycles; NaN when none
	FilterSamples      float64
	APIServerRSS       int64 // bytes, after the burst
	SchedulerRSS       int64
	EtcdBytes          int64 // in use, after the burst
	SliceBytesPerNode  float64
	SetupSeconds       float64
	ChurnPods          int
	ChurnP50, ChurnP99 float64
	// Singles are the burst's pods that take one EFA; Unserved those of
	// them the shape cannot serve, left pending, and UnservedReason what
	// the scheduler says of one.
	Singles, Unserved int    `json:",omitempty"`
	UnservedReason    string `json:",omitempty"`
	// ExplainSeconds and ExplainRSS are what efakit explain of one pod
	// left pending took: wall time and the process's peak RSS (bytes).
	ExplainSeconds float64 `json:",omitempty"`
	ExplainRSS     int64   `json:",omitempty"`
}

// runScale runs every size, round and shape, prints the tables and returns
// the results; check makes it verify each claim's allocation.
func runScale(t *testing.T, s scaleSettings, check bool) []scaleResult {
	var out io.Writer = io.Discard
	if s.out != "" {
		f, err := os.OpenFile(s.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		defer f.Close()
		out = f
	}
	var all []scaleResult
	cs := s.contenders()
	for _, n := range s.nodes {
		var results []scaleResult
		for round := range s.rounds {
			for i := range cs {
				ct := cs[(i+round)%len(cs)]
				start := time.Now()
				r := runScaleOnce(t, s, ct, n, round, check)
				t.Logf("%d nodes, round %d, %s: %.2f pods/s, p99 %.2f s, scheduler %.1f ms/pod, %s (%s)", n, round+1, ct.name,
					r.PodsPerSecond, r.P99, r.SchedulerCPUms, mib(r.APIServerRSS), time.Since(start).Round(time.Second))
				b, _ := json.Marshal(r)
				fmt.Fprintf(out, "%s\n", b)
				results = append(results, r)
			}
		}
		fmt.Print(scaleTable(results, s))
		all = append(all, results...)
	}
	return all
}

// contender is what one run measures: a shape, the scheduler's client
// rate ("QPS/burst", "" for its default) and percentageOfNodesToScore (0
// for its default).
type contender struct {
	*shape
	rate  string
	score int
	name  string
}

// contenders are the shapes, each with every rate and percentage asked
// for.
func (s scaleSettings) contenders() []contender {
	scores, rates := s.scores, s.rates
	if len(scores) == 0 {
		scores = []int{0}
	}
	if len(rates) == 0 {
		rates = []string{""}
	}
	var cs []contender
	for _, sh := range s.shapes {
		for _, r := range rates {
			for _, sc := range scores {
				cs = append(cs, newContender(sh, r, sc))
			}
		}
	}
	return cs
}

// newContender is sh with the scheduler's client rate and
// percentageOfNodesToScore, named after what differs from the defaults
// ("efakit", "efakit@q200", "efakit@q200@10%").
func newContender(sh *shape, rate string, score int) contender {
	c := contender{shape: sh, rate: rate, score: score, name: sh.name}
	if q, _, ok := strings.Cut(rate, "/"); ok {
		c.name += "@q" + q
	}
	if score != 0 {
		c.name += fmt.Sprintf("@%d%%", score)
	}
	return c
}

// schedulerConfig is the KubeSchedulerConfiguration for a contender, ""
// where the scheduler's defaults and flags do: with --config, kube-scheduler
// ignores --kubeconfig and --kube-api-qps/--kube-api-burst, so the file
// holds the client's settings too.
func schedulerConfig(ct contender, kubeconfig string) string {
	if ct.score == 0 && ct.rate == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection: {leaderElect: false}\n")
	fmt.Fprintf(&b, "clientConnection:\n  kubeconfig: %q\n", kubeconfig)
	if q, burst, ok := strings.Cut(ct.rate, "/"); ok {
		fmt.Fprintf(&b, "  qps: %s\n  burst: %s\n", q, burst)
	}
	if ct.score != 0 {
		fmt.Fprintf(&b, "percentageOfNodesToScore: %d\n", ct.score)
	}
	return b.String()
}

// checkSchedulerConfig reads back, from the scheduler's /configz, that it
// runs with the contender's rate and percentageOfNodesToScore.
func checkSchedulerConfig(t *testing.T, c *harness.ControlPlane, ct contender) {
	t.Helper()
	var got struct {
		Config struct {
			PercentageOfNodesToScore *int32 `json:"percentageOfNodesToScore"`
			ClientConnection         struct {
				QPS   float32 `json:"qps"`
				Burst int32   `json:"burst"`
			} `json:"clientConnection"`
		} `json:"componentconfig"`
	}
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		resp, err := getWithToken(c.Scheduler + "/configz")
		require.NoError(col, err)
		defer resp.Body.Close()
		require.Equal(col, http.StatusOK, resp.StatusCode)
		require.NoError(col, json.NewDecoder(resp.Body).Decode(&got))
	}, time.Minute, 200*time.Millisecond, "the scheduler's /configz")
	if ct.score != 0 {
		require.NotNil(t, got.Config.PercentageOfNodesToScore, "%s: percentageOfNodesToScore in /configz", ct.name)
		require.Equal(t, int32(ct.score), *got.Config.PercentageOfNodesToScore, "%s: percentageOfNodesToScore", ct.name)
	}
	if q, b, ok := strings.Cut(ct.rate, "/"); ok {
		require.Equal(t, q+"/"+b, fmt.Sprintf("%g/%d", got.Config.ClientConnection.QPS, got.Config.ClientConnection.Burst), "%s: the scheduler's client rate", ct.name)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// runScaleOnce is one shape at one size: a control plane of its own, the
// fleet, a burst, churn.
func runScaleOnce(t *testing.T, s scaleSettings, ct contender, nodes, round int, check bool) scaleResult {
	ctx := context.Background()
	sh := ct.shape
	c, err := harness.StartControlPlane()
	require.NoError(t, err)
	defer c.Stop()
	var schedArgs []string
	if conf := schedulerConfig(ct, filepath.Join(c.Dir, "admin.kubeconfig")); conf != "" {
		path := filepath.Join(c.Dir, "scheduler-config.yaml")
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
		schedArgs = []string{"--config", path}
	}
	require.NoError(t, c.StartScheduler(schedArgs...))
	if schedArgs != nil {
		checkSchedulerConfig(t, c, ct)
	}
	require.NoError(t, c.StartControllerManager())
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	res := scaleResult{Shape: ct.name, Mix: s.mix.String(), Nodes: nodes, Round: round + 1, Pods: s.pods, NodesToScore: ct.score, SchedulerRate: ct.rate}
	if sh.uniform {
		res.Mix = ""
	}

	// The fleet.
	const ns = "scale"
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, dc := range sh.classes {
		_, err := client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		require.NoError(t, harness.CreateIgnoreExists(err))
	}
	setup := time.Now()
	devices := newDeviceIndex()
	var sliceBytes, capacity int64
	var mu sync.Mutex
	parallel(t, nodes, 32, func(i int) error {
		name := fmt.Sprintf("node-%05d", i)
		it := s.mix.of(i)
		if err := createReadyNode(ctx, client, scaleNode(name, it)); err != nil {
			return err
		}
		slices := sh.slices(name, it)
		for _, sl := range slices {
			if _, err := client.ResourceV1().ResourceSlices().Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("slice of %s: %w", name, err)
			}
		}
		devices.add(slices)
		mu.Lock()
		sliceBytes += int64(sliceBytesOf(slices, sh.ownDriver))
		capacity += int64(sh.perNode(it))
		mu.Unlock()
		return nil
	})
	res.SetupSeconds = time.Since(setup).Seconds()
	res.SliceBytesPerNode = float64(sliceBytes) / float64(nodes)
	require.LessOrEqual(t, int64(s.pods), capacity, "%s: the burst fits the fleet (%d pods)", sh.name, capacity)
	sched := newScraper(c, "kube-scheduler")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := sched.scrape()
		require.NoError(c, err)
		assert.Equal(c, float64(nodes), m.Value("scheduler_cache_size", map[string]string{"type": "nodes"}), "the nodes in the scheduler's cache")
	}, 5*time.Minute, 500*time.Millisecond, "the scheduler sees the %d nodes", nodes)

	// The claims, one template per instance type.
	templates := map[string]string{} // instance type -> template
	for _, e := range s.mix {
		tm := sh.template(e.it)
		if tm == nil {
			continue
		}
		tm.Name = strings.ReplaceAll(e.it.name, ".", "-") + "-" + tm.Name
		if sh.uniform {
			tm.Name = "claim"
		}
		templates[e.it.name] = tm.Name
		_, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tm, metav1.CreateOptions{})
		require.NoError(t, harness.CreateIgnoreExists(err))
	}
	// The pods that take one EFA, where the mix asks for them.
	mix := podMix{share: s.singles, templates: map[string]string{}}
	if s.singles > 0 && sh.single != nil {
		for _, e := range s.mix {
			tm := sh.single(e.it)
			tm.Name = strings.ReplaceAll(e.it.name, ".", "-") + "-" + tm.Name
			mix.templates[e.it.name] = tm.Name
			_, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tm, metav1.CreateOptions{})
			require.NoError(t, harness.CreateIgnoreExists(err))
		}
	}
	pod := func(name string, i int) *corev1.Pod {
		if mix.single(i) {
			return scalePod(name, s.mix.of(i), sh, mix.templates)
		}
		return scalePod(name, s.mix.of(i), sh, templates)
	}
	servable := 0
	for i := range s.pods {
		if !mix.single(i) || sh.servesSingle {
			servable++
		}
		if mix.single(i) {
			res.Singles++
		}
	}
	res.Unserved = s.pods - servable

	// The burst.
	w := startBindWatch(t, ctx, client, ns)
	defer w.stop()
	before, err := sched.scrape()
	require.NoError(t, err)
	cpu0 := procCPU(t, procOf(c, "kube-scheduler"))
	stopProfile := profileScheduler(t, c, s.pprof, fmt.Sprintf("%s-%d-r%d", strings.TrimSuffix(strings.ReplaceAll(ct.name, "@", "-"), "%"), nodes, round+1))
	first := time.Now()
	parallel(t, s.pods, 32, func(i int) error {
		return w.create(ctx, pod(fmt.Sprintf("burst-%05d", i), i))
	})
	res.Bound = w.wait(servable, burstTimeout(servable))
	stopProfile()
	if res.Bound < servable {
		t.Fatalf("%s, %d nodes: %d of %d pods bound in %s; %s", ct.name, nodes, res.Bound, servable,
			burstTimeout(servable), unboundReason(ctx, client, ns))
	}
	pending := ""
	if res.Unserved > 0 {
		// The pods the shape cannot serve stay pending, and the
		// scheduler says why.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			unbound, reason, name := unboundCount(ctx, client, ns)
			assert.Equal(c, res.Unserved, unbound, "the pods the shape cannot serve, pending")
			assert.Contains(c, reason, "cannot allocate all claims")
			res.UnservedReason, pending = reason, name
		}, 2*time.Minute, time.Second)
		t.Logf("%s, %d nodes: %d pods left pending; the scheduler says: %s", ct.name, nodes, res.Unserved, res.UnservedReason)
	}
	last := w.lastBound()
	res.PodsPerSecond = float64(res.Bound) / last.Sub(first).Seconds()
	lat := percentilesOf(w.latencies())
	res.P50, res.P99 = lat.p50.Seconds(), lat.p99.Seconds()
	res.SchedulerCPUms = (procCPU(t, procOf(c, "kube-scheduler")) - cpu0).Seconds() * 1000 / float64(max(res.Bound, 1))
	after, err := sched.scrape()
	require.NoError(t, err)
	dra := map[string]string{"plugin": "DynamicResources", "extension_point": "Filter"}
	sum := after.Value("scheduler_plugin_execution_duration_seconds_sum", dra) - before.Value("scheduler_plugin_execution_duration_seconds_sum", dra)
	res.FilterSamples = after.Value("scheduler_plugin_execution_duration_seconds_count", dra) - before.Value("scheduler_plugin_execution_duration_seconds_count", dra)
	res.FilterPerNodeUs = math.NaN()
	if res.FilterSamples > 0 {
		res.FilterPerNodeUs = sum / res.FilterSamples * 1e6
	}
	res.APIServerRSS = procRSS(t, procOf(c, "kube-apiserver"))
	res.SchedulerRSS = procRSS(t, procOf(c, "kube-scheduler"))
	res.EtcdBytes = etcdInUse(t, c)
	if check {
		checkAllocations(t, ctx, client, ns, devices, res.Bound)
	}
	if pending != "" {
		// What efakit explain of one costs on this fleet, after the
		// burst's readings (it lists every node, slice and claim).
		res.ExplainSeconds, res.ExplainRSS = explainPending(t, c, ns+"/"+pending)
	}

	// Churn: one pod deleted and one created at the rate, the fleet as
	// full as the burst left it.
	if s.churn > 0 {
		res.ChurnPods, res.ChurnP50, res.ChurnP99 = churn(t, ctx, client, w, s, func(i int) (*corev1.Pod, bool) {
			return pod(fmt.Sprintf("churn-%05d", i), i), !mix.single(i) || sh.servesSingle
		})
	}
	return res
}

// burstTimeout allows a burst one pod a second and two minutes more: ten
// times slower than the slowest shape measured.
func burstTimeout(pods int) time.Duration { return time.Duration(pods)*time.Second + 2*time.Minute }

func scalePod(name string, it *instanceType, sh *shape, templates map[string]string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			AutomountServiceAccountToken: new(bool)}}
	if !sh.uniform {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelInstanceTypeStable: it.name}
	}
	if tm, ok := templateOf(it, sh, templates); ok {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &tm}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devices"}}
	}
	return pod
}

// templateOf is the claim template of a pod on the instance type, by its
// name: a uniform shape's nodes are all alike, and its one template
// serves every pod; plain pods have none.
func templateOf(it *instanceType, sh *shape, templates map[string]string) (string, bool) {
	if sh.uniform {
		for _, tm := range templates {
			return tm, true
		}
		return "", false
	}
	tm, ok := templates[it.name]
	return tm, ok
}

// churn deletes the oldest bound pod and creates a new one at the rate for
// the duration, and returns how many new pods bound and their latency.
func churn(t *testing.T, ctx context.Context, client kubernetes.Interface, w *bindWatch, s scaleSettings, pod func(i int) (*corev1.Pod, bool)) (int, float64, float64) {
	t.Helper()
	w.resetLatencies()
	tick := time.NewTicker(time.Duration(float64(time.Second) / s.churnRate))
	defer tick.Stop()
	end := time.Now().Add(s.churn)
	servable := 0
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		if victim := w.oldestBound(); victim != "" {
			require.NoError(t, client.CoreV1().Pods("scale").Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
		}
		p, ok := pod(i)
		require.NoError(t, w.create(ctx, p))
		if ok {
			servable++
		}
	}
	bound := w.wait(servable, time.Minute)
	p := percentilesOf(w.latencies())
	return bound, p.p50.Seconds(), p.p99.Seconds()
}

// podMix says which pods of a burst take one EFA: share of them, spread
// evenly (pod i when (i+1)*share reaches a new whole number).
type podMix struct {
	share     float64
	templates map[string]string // instance type -> the single-EFA template
}

func (m podMix) single(i int) bool {
	return len(m.templates) > 0 && math.Floor(float64(i+1)*m.share) > math.Floor(float64(i)*m.share)
}

// unboundCount is how many of the namespace's pods are unbound, what the
// scheduler said of one of them, and that pod's name.
func unboundCount(ctx context.Context, client kubernetes.Interface, ns string) (int, string, string) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
	if err != nil {
		return -1, err.Error(), ""
	}
	reason, name := "", ""
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				reason, name = c.Reason+": "+c.Message, p.Name
			}
		}
	}
	return len(pods.Items), reason, name
}

// parallel runs f for 0..n-1 on workers goroutines; the first error fails
// the test.
func parallel(t *testing.T, n, workers int, f func(int) error) {
	t.Helper()
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}
}

// createReadyNode registers a node as a kubelet would: created, then
// Ready, then without the not-ready taint the API server gave it (no node
// lifecycle controller runs here to lift it).
func createReadyNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node) error {
	node, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	node.Status.Capacity = corev1.ResourceList{"cpu": mustQ("192"), "memory": mustQ("2Ti"), "pods": mustQ("110")}
	node.Status.Allocatable = node.Status.Capacity
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if node, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	node.Spec.Taints = nil
	_, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

// bindWatch watches a namespace's pods (an informer, which lists again
// where its watch ends) and records when each was created (by this
// client, just before the request) and when the scheduler bound it (when
// the informer first shows its node).
type bindWatch struct {
	mu      sync.Mutex
	client  kubernetes.Interface
	ns      string
	created map[string]time.Time
	bound   map[string]time.Time
	order   []string // bound pods, oldest binding first
	lats    []time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
}

func startBindWatch(t *testing.T, ctx context.Context, client kubernetes.Interface, ns string) *bindWatch {
	ctx, cancel := context.WithCancel(ctx)
	b := &bindWatch{client: client, ns: ns, created: map[string]time.Time{}, bound: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, seen := b.bound[p.Name]; !seen {
			b.bound[p.Name] = now
			b.order = append(b.order, p.Name)
			if c, ok := b.created[p.Name]; ok {
				b.lats = append(b.lats, now.Sub(c))
			}
		}
	}
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", ns, fields.Everything()),
		&corev1.Pod{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }})
	require.NoError(t, err)
	go func() {
		defer close(b.done)
		inf.Run(ctx.Done())
	}()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "the pods' informer synced")
	return b
}

func (b *bindWatch) stop() { b.cancel(); <-b.done }

func (b *bindWatch) create(ctx context.Context, pod *corev1.Pod) error {
	b.mu.Lock()
	b.created[pod.Name] = time.Now()
	b.mu.Unlock()
	_, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// wait waits until n of the pods created since the last reset are bound,
// or the timeout; it returns how many are.
func (b *bindWatch) wait(n int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		b.mu.Lock()
		got := len(b.lats)
		b.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unboundReason is what the scheduler said of one pod it has not bound,
// and the state of that pod's claims.
func unboundReason(ctx context.Context, client kubernetes.Interface, ns string) string {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) == 0 {
		return "no pod is unbound now"
	}
	p := pods.Items[0]
	out := fmt.Sprintf("pod %s (%d unbound):", p.Name, len(pods.Items))
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out += fmt.Sprintf(" %s %s: %s;", c.Status, c.Reason, c.Message)
		}
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			out += fmt.Sprintf(" claim %s not yet created;", st.Name)
			continue
		}
		cl, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			out += fmt.Sprintf(" claim %s: %v;", *st.ResourceClaimName, err)
			continue
		}
		out += fmt.Sprintf(" claim %s allocated %v;", cl.Name, cl.Status.Allocation != nil)
	}
	if len(p.Spec.ResourceClaims) > 0 && len(p.Status.ResourceClaimStatuses) == 0 {
		out += " no claim made for it (is the resource claim controller running?)"
	}
	return out
}

func (b *bindWatch) lastBound() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound[b.order[len(b.order)-1]]
}

func (b *bindWatch) latencies() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.lats...)
}

func (b *bindWatch) resetLatencies() {
	b.mu.Lock()
	b.lats = nil
	b.mu.Unlock()
}

// oldestBound takes the pod bound longest ago off the list.
func (b *bindWatch) oldestBound() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.order) == 0 {
		return ""
	}
	p := b.order[0]
	b.order = b.order[1:]
	return p
}

// scaleTable is one size's figures, each shape's median and range over
// the rounds, and the ratios of the pairs that answer the same question,
// each ratio taken within a round.
func scaleTable(rs []scaleResult, s scaleSettings) string {
	var b strings.Builder
	if len(rs) == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\n== %d nodes (fleet %s), bursts of %d pods, %d round(s)", rs[0].Nodes, s.mix, s.pods, s.rounds)
	if s.churn > 0 {
		fmt.Fprintf(&b, ", churn %s at %.0f pods/s", s.churn, s.churnRate)
	}
	b.WriteString("\n")
	byShape := map[string]map[int]scaleResult{}
	var shapes []string
	for _, r := range rs {
		if byShape[r.Shape] == nil {
			byShape[r.Shape] = map[int]scaleResult{}
			shapes = append(shapes, r.Shape)
		}
		byShape[r.Shape][r.Round] = r
	}
	// The API server's memory a node's objects cost: above the plain
	// shape's of the same round (its nodes and pods, no slices or claims).
	overPlain := func(r scaleResult) float64 {
		p, ok := byShape["plain"][r.Round]
		if !ok || r.Shape == "plain" {
			return math.NaN()
		}
		return float64(r.APIServerRSS-p.APIServerRSS) / (1 << 20) / float64(r.Nodes) * 1000
	}
	// ratio: the row has a ratio between shapes (the set-up time and
	// the churn's latencies are a round's, not a shape's cost).
	metrics := []struct {
		name  string
		of    func(r scaleResult) float64
		ratio bool
	}{
		{"pods bound/s", func(r scaleResult) float64 { return r.PodsPerSecond }, true},
		{"pods left pending", func(r scaleResult) float64 { return float64(r.Unserved) }, false},
		{"latency p50 s", func(r scaleResult) float64 { return r.P50 }, true},
		{"latency p99 s", func(r scaleResult) float64 { return r.P99 }, true},
		{"scheduler CPU ms/pod", func(r scaleResult) float64 { return r.SchedulerCPUms }, true},
		{"DRA Filter us/node", func(r scaleResult) float64 { return r.FilterPerNodeUs }, true},
		{"apiserver RSS MiB", func(r scaleResult) float64 { return float64(r.APIServerRSS) / (1 << 20) }, true},
		{"apiserver MiB/1k nodes", overPlain, true},
		{"scheduler RSS MiB", func(r scaleResult) float64 { return float64(r.SchedulerRSS) / (1 << 20) }, true},
		{"etcd in use MiB", func(r scaleResult) float64 { return float64(r.EtcdBytes) / (1 << 20) }, true},
		{"slice KB/node", func(r scaleResult) float64 { return r.SliceBytesPerNode / 1000 }, true},
		{"fleet set-up s", func(r scaleResult) float64 { return r.SetupSeconds }, false},
		{"churn p50 s", func(r scaleResult) float64 { return churned(r, r.ChurnP50) }, false},
		{"churn p99 s", func(r scaleResult) float64 { return churned(r, r.ChurnP99) }, false},
		{"explain s", func(r scaleResult) float64 { return explained(r, r.ExplainSeconds) }, false},
		{"explain RSS MiB", func(r scaleResult) float64 { return explained(r, float64(r.ExplainRSS)/(1<<20)) }, false},
	}
	fmt.Fprintf(&b, "%-22s", "")
	for _, sh := range shapes {
		fmt.Fprintf(&b, " %22s", sh)
	}
	b.WriteString("\n")
	mixed := slices.ContainsFunc(rs, func(r scaleResult) bool { return r.Singles > 0 })
	for _, m := range metrics {
		if (m.name == "pods left pending" || strings.HasPrefix(m.name, "explain ")) && !mixed {
			continue
		}
		fmt.Fprintf(&b, "%-22s", m.name)
		for _, sh := range shapes {
			var v []float64
			for _, r := range byShape[sh] {
				v = append(v, m.of(r))
			}
			fmt.Fprintf(&b, " %22s", spread(v))
		}
		b.WriteString("\n")
	}
	pairs := [][2]string{{"efakit", "upstream"}, {"efakit", "dranet"}, {"efakit", "efakit-full"}, {"efakit-mixed", "efakit"},
		{"efakit-exclusive", "efakit"}, {"efakit-exclusive", "upstream"}, {"dranet", "upstream"}, {"efakit", "plain"}}
	// Each shape with another client rate or percentageOfNodesToScore,
	// against the shape at the scheduler's defaults.
	for _, sh := range shapes {
		if base, _, ok := strings.Cut(sh, "@"); ok {
			pairs = append(pairs, [2]string{sh, base})
		}
	}
	fmt.Fprintf(&b, "ratios, median [min-max] over rounds\n%-22s", "")
	var have [][2]string
	for _, p := range pairs {
		if byShape[p[0]] != nil && byShape[p[1]] != nil {
			have = append(have, p)
			fmt.Fprintf(&b, " %22s", p[0]+"/"+p[1])
		}
	}
	b.WriteString("\n")
	for _, m := range metrics {
		if !m.ratio {
			continue
		}
		fmt.Fprintf(&b, "%-22s", m.name)
		for _, p := range have {
			var v []float64
			for round, a := range byShape[p[0]] {
				if z, ok := byShape[p[1]][round]; ok {
					v = append(v, m.of(a)/m.of(z))
				}
			}
			fmt.Fprintf(&b, " %22s", spread(v))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// churned is a churn figure, NaN (shown "-") where no churn ran.
// explained is v where efakit explain ran, NaN (printed "-") elsewhere.
func explained(r scaleResult, v float64) float64 {
	if r.ExplainSeconds == 0 {
		return math.NaN()
	}
	return v
}

func churned(r scaleResult, v float64) float64 {
	if r.ChurnPods == 0 {
		return math.NaN()
	}
	return v
}

// spread is a sample's median with its range; "-" where nothing is known.
func spread(v []float64) string {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return "-"
	}
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	f := func(x float64) string {
		switch {
		case x >= 100:
			return fmt.Sprintf("%.0f", x)
		case x >= 10:
			return fmt.Sprintf("%.1f", x)
		default:
			return fmt.Sprintf("%.2f", x)
		}
	}
	if len(s) == 1 {
		return f(med)
	}
	return fmt.Sprintf("%s [%s-%s]", f(med), f(s[0]), f(s[len(s)-1]))
}

// deviceIndex is every published device's attributes, by driver, pool and
// name, to check allocations against.
type deviceIndex struct {
	mu   sync.Mutex
	attr map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

func newDeviceIndex() *deviceIndex {
	return &deviceIndex{attr: map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
}

func (d *deviceIndex) add(slices []*resourceapi.ResourceSlice) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range slices {
		for _, dev := range s.Spec.Devices {
			d.attr[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+dev.Name] = dev.Attributes
		}
	}
}

// value is a device's attribute by its fully qualified name (an
// unqualified one is in the driver's domain).
func (d *deviceIndex) value(driver, pool, device string, name resourceapi.FullyQualifiedName) (string, bool) {
	attrs := d.attr[driver+"/"+pool+"/"+device]
	domain, id, _ := strings.Cut(string(name), "/")
	a, ok := attrs[resourceapi.QualifiedName(name)]
	if !ok && domain == driver {
		a, ok = attrs[resourceapi.QualifiedName(id)]
	}
	if !ok {
		return "", false
	}
	b, _ := json.Marshal(a)
	return string(b), true
}

// checkAllocations checks that want claims of the namespace are allocated
// (the others are of pods the shape cannot serve), each on one node, with
// the devices its requests ask, and that the devices of each
// matchAttribute constraint share the attribute, as published.
func checkAllocations(t *testing.T, ctx context.Context, client kubernetes.Interface, ns string, devices *deviceIndex, want int) {
	t.Helper()
	claims, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	allocated := 0
	for _, cl := range claims.Items {
		a := cl.Status.Allocation
		if a == nil {
			// A pod the shape cannot serve (the pod mix); want counts
			// the others.
			continue
		}
		allocated++
		byReq := map[string][]resourceapi.DeviceRequestAllocationResult{}
		for _, r := range a.Devices.Results {
			byReq[r.Request] = append(byReq[r.Request], r)
		}
		for _, req := range cl.Spec.Devices.Requests {
			assert.Len(t, byReq[req.Name], int(req.Exactly.Count), "claim %s request %s", cl.Name, req.Name)
		}
		for _, c := range cl.Spec.Devices.Constraints {
			if c.MatchAttribute == nil {
				continue
			}
			values := map[string]bool{}
			for _, req := range c.Requests {
				for _, r := range byReq[req] {
					v, ok := devices.value(r.Driver, r.Pool, r.Device, *c.MatchAttribute)
					assert.True(t, ok, "claim %s: %s/%s has %s", cl.Name, r.Pool, r.Device, *c.MatchAttribute)
					values[v] = true
				}
			}
			assert.Len(t, values, 1, "claim %s: its devices share %s: %v", cl.Name, *c.MatchAttribute, values)
		}
	}
	if len(claims.Items) > 0 {
		assert.Equal(t, want, allocated, "claims allocated")
	}
}
