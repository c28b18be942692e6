package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/test/e2e/harness"
)

// The plugin's own API cost at fleet scale: N real efakit-plugin
// processes, each on the p5 fixture with a node name of its own, against
// one kube-apiserver whose audit log records every request they make
// (their user agent, efakit-plugin/...). Four phases, one after the
// other: all plugins start at once; steady state; a kubelet-restart storm
// (every dra.net slice deleted at once, as restarting kubelets delete
// their nodes'); an API server restart (every watch breaks and lists
// again). Each phase's requests per plugin and their spread in time are
// printed with the arithmetic per 1,000 nodes (docs/fleet.md).
//
// make plugin-fleet sets:
//
//	EFAKIT_PLUGIN_FLEET         plugins (50)
//	EFAKIT_PLUGIN_FLEET_STEADY  the steady window (3m; the plugins run with their default intervals)
//	EFAKIT_PLUGIN_FLEET_BIN     another efakit-plugin binary to measure (a build of an older commit)

// fleetPhase is one phase of the run: its window and the plugins'
// requests in it.
type fleetPhase struct {
	name       string
	start, end time.Time
	reqs       []auditReq
}

type auditReq struct {
	at       time.Time
	verb     string
	resource string
}

// auditPolicy logs every request's metadata once it has been answered
// (a watch once it started).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func TestPluginFleetSmoke(t *testing.T) {
	if os.Getenv("EFAKIT_PLUGIN_FLEET") != "" {
		t.Skip("make plugin-fleet runs TestPluginFleet")
	}
	// Rescans every 5 s, so that the steady window holds three. The API
	// server's restart is short and its after-math not waited out: the
	// smoke checks only that every plugin publishes again and none exits
	// (make plugin-fleet measures the renewed watches).
	runPluginFleet(t, 4, fleetTimes{settle: 5 * time.Second, steady: 15 * time.Second, down: 3 * time.Second, after: 5 * time.Second}, "", "--rescan-interval", "5s")
}

func TestPluginFleet(t *testing.T) {
	v := os.Getenv("EFAKIT_PLUGIN_FLEET")
	if v == "" {
		t.Skip("make plugin-fleet (EFAKIT_PLUGIN_FLEET=N)")
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "EFAKIT_PLUGIN_FLEET")
	steady := 3 * time.Minute
	if s := os.Getenv("EFAKIT_PLUGIN_FLEET_STEADY"); s != "" {
		steady, err = time.ParseDuration(s)
		require.NoError(t, err, "EFAKIT_PLUGIN_FLEET_STEADY")
	}
	runPluginFleet(t, n, fleetTimes{settle: 10 * time.Second, steady: steady, down: 10 * time.Second, after: 45 * time.Second}, os.Getenv("EFAKIT_PLUGIN_FLEET_BIN"))
}

// fleetTimes are the phases' windows: the settling after the start and
// after the storm (their requests end within 1-3 s), the steady state, how long the API
// server is away, and how long its restart's after-math is counted (the
// watches renewed once the clients' back-off ends).
type fleetTimes struct {
	settle, steady, down, after time.Duration
}

func runPluginFleet(t *testing.T, n int, times fleetTimes, bin string, args ...string) {
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	require.NoError(t, os.WriteFile(policy, []byte(auditPolicy), 0o644))
	c, err := harness.StartControlPlane("--audit-policy-file", policy, "--audit-log-path", auditLog)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()
	if bin == "" {
		bin, err = harness.PluginBinary()
		require.NoError(t, err)
	} else {
		// Named efakit-plugin, as its user agent says (client-go takes
		// the program's name).
		link := filepath.Join(dir, "bin", "efakit-plugin")
		require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
		require.NoError(t, os.Symlink(bin, link))
		bin = link
	}

	// One sysfs directory for all: the plugins only read it.
	f, err := os.Open(p5Fixture)
	require.NoError(t, err)
	entries, err := sysfs.ParseCapture(f)
	f.Close()
	require.NoError(t, err)
	sys := filepath.Join(dir, "sys")
	require.NoError(t, sysfs.WriteDir(sys, entries))
	// The plugins act as the chart's: its role, its admission policy, a
	// token bound to a pod on each node (a role the plugin outgrew fails
	// here, as it would on a cluster).
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "efakit"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var access []runtime.Object
	for _, o := range harness.Render(t) {
		if _, ok := o.(*appsv1.DaemonSet); !ok {
			access = append(access, o)
		}
	}
	harness.Apply(t, c.Config, access)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%03d", i)
		require.NoError(t, createReadyNode(ctx, c.Client, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}))
	}
	kubeconfigs := make([]string, n)
	for i, name := range names {
		d := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		kubeconfigs[i] = harness.PluginKubeconfig(t, c, "efakit", name, d)
	}

	// All plugins start at once, as on a fleet launched together.
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_, _ = p.Process.Wait()
		}
	})
	begin := time.Now()
	for i, name := range names {
		d := filepath.Join(dir, name)
		for _, sub := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
			require.NoError(t, os.MkdirAll(filepath.Join(d, sub), 0o755))
		}
		require.NoError(t, os.WriteFile(filepath.Join(d, "proc/sys/kernel/random/boot_id"), []byte("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11\n"), 0o644))
		cmd := exec.Command(bin, append([]string{"--node-name", name, "--kubeconfig", kubeconfigs[i],
			"--sysfs", sys, "--proc", filepath.Join(d, "proc"), "--cdi-root", filepath.Join(d, "cdi"),
			"--kubelet-registrar-directory-path", filepath.Join(d, "reg"), "--kubelet-plugins-directory-path", filepath.Join(d, "plugins"),
			"--pod-resources-socket", "", "--http-address", "", "-v", "1"}, args...)...)
		log, err := os.Create(filepath.Join(d, "plugin.log"))
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		log.Close()
		procs = append(procs, cmd)
	}
	logOf := func(i int) string {
		b, _ := os.ReadFile(filepath.Join(dir, names[i], "plugin.log"))
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		return string(b)
	}
	// Every node's 32 EFAs published.
	published := func() (int, string) {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net"})
		if err != nil {
			return 0, err.Error()
		}
		devs := map[string]int{}
		for _, s := range l.Items {
			devs[*s.Spec.NodeName] += len(s.Spec.Devices)
		}
		full, missing := 0, ""
		for _, name := range names {
			if devs[name] == 32 {
				full++
			} else if missing == "" {
				missing = fmt.Sprintf("%s has %d devices", name, devs[name])
			}
		}
		return full, missing
	}
	waitPublished := func(what string) time.Time {
		// The message is made when the wait fails (the plugin's log as it
		// is then), not when it starts.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			full, missing := published()
			if full != n {
				c.Errorf("%s: %d of %d nodes have every slice; %s; first plugin's log:\n%s", what, full, n, missing, logOf(0))
			}
		}, time.Duration(60+n)*time.Second, 100*time.Millisecond, "%s: every node's slices", what)
		return time.Now()
	}
	var phases []*fleetPhase
	phase := func(name string, start, end time.Time) {
		phases = append(phases, &fleetPhase{name: name, start: start, end: end})
	}

	allUp := waitPublished("start")
	time.Sleep(times.settle)
	phase("start", begin, time.Now())
	t.Logf("%d plugins published in %s", n, allUp.Sub(begin).Round(time.Millisecond))

	s0 := time.Now()
	time.Sleep(times.steady)
	phase("steady", s0, time.Now())

	// Restarting kubelets delete every slice of their node: all at once.
	l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net"})
	require.NoError(t, err)
	deleted := len(l.Items)
	s0 = time.Now()
	require.NoError(t, c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=dra.net"}))
	back := waitPublished("after every slice was deleted")
	t.Logf("every slice back %s after the delete", back.Sub(s0).Round(time.Millisecond))
	time.Sleep(times.settle)
	phase("kubelet-restart storm", s0, time.Now())

	// The API server goes away: every watch breaks, and the plugins'
	// clients back off until it answers again.
	s0 = time.Now()
	c.StopAPIServer()
	time.Sleep(times.down)
	require.NoError(t, c.StartAPIServer())
	ready := time.Now()
	waitPublished("after the API server restart")
	time.Sleep(times.after)
	phase("API server restart", s0, time.Now())
	t.Logf("API server ready again %s after it stopped", ready.Sub(s0).Round(time.Millisecond))
	for i, p := range procs {
		require.Nil(t, p.ProcessState, "plugin %s exited; log:\n%s", names[i], logOf(i))
	}

	readAudit(t, auditLog, phases)
	t.Log("\n" + fleetTable(n, phases))
	require.NotEmpty(t, phases[0].reqs, "the audit log holds the plugins' start (user agent efakit-plugin/...)")

	// What the plugin promises: its checks for another owner read
	// watches, so steady state costs the API server nothing but the
	// watches it holds; and each phase's requests are bounded.
	for _, p := range phases {
		if p.name == "steady" {
			for _, r := range p.reqs {
				assert.Equal(t, "watch", r.verb, "steady state: a %s of %s at %s", r.verb, r.resource, r.at.Format(time.TimeOnly))
			}
		}
		if p.name == "kubelet-restart storm" {
			creates := 0
			for _, r := range p.reqs {
				if r.verb == "create" && r.resource == "resourceslices" {
					creates++
				}
			}
			assert.Equal(t, deleted, creates, "each plugin creates its deleted slices again, once")
			assert.LessOrEqual(t, len(p.reqs), 3*n, "storm: requests (a create, at most two more per plugin)")
		}
	}
}

// readAudit puts the plugins' requests of the audit log into the phases
// by the time the API server received them (a request answered twice in
// the log, a watch's start and end, counts once).
func readAudit(t *testing.T, file string, phases []*fleetPhase) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct {
			AuditID   string `json:"auditID"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef *struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
			Received metav1.MicroTime `json:"requestReceivedTimestamp"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		if !strings.HasPrefix(e.UserAgent, "efakit-plugin/") || seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		r := auditReq{at: e.Received.Time, verb: e.Verb}
		if e.ObjectRef != nil {
			r.resource = e.ObjectRef.Resource
		}
		for _, p := range phases {
			if !r.at.Before(p.start) && r.at.Before(p.end) {
				p.reqs = append(p.reqs, r)
			}
		}
	}
	require.NoError(t, sc.Err())
}

// fleetTable is each phase's requests per plugin, by verb and resource,
// their spread and peak, and the same per 1,000 nodes.
func fleetTable(n int, phases []*fleetPhase) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "phase (%d plugins)\twindow\trequests\tper plugin\tby verb and resource, per plugin\tfirst to last\tpeak /s\tper 1,000 nodes\n", n)
	for _, p := range phases {
		by := map[string]int{}
		perSecond := map[int64]int{}
		var first, last time.Time
		for _, r := range p.reqs {
			by[r.verb+" "+r.resource]++
			perSecond[r.at.Unix()]++
			if first.IsZero() || r.at.Before(first) {
				first = r.at
			}
			if r.at.After(last) {
				last = r.at
			}
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return by[keys[i]] > by[keys[j]] || by[keys[i]] == by[keys[j]] && keys[i] < keys[j]
		})
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(by[k])/float64(n)))
		}
		peak := 0
		for _, c := range perSecond {
			peak = max(peak, c)
		}
		window := p.end.Sub(p.start)
		per := float64(len(p.reqs)) / float64(n)
		spread := "-"
		if len(p.reqs) > 0 {
			spread = last.Sub(first).Round(10 * time.Millisecond).String()
		}
		var scaled string
		if p.name == "steady" {
			// A rate: requests per plugin per second, times 1,000.
			scaled = fmt.Sprintf("%.2f/plugin/s x 1,000 = %.1f requests/s", per/window.Seconds(), 1000*per/window.Seconds())
		} else {
			scaled = fmt.Sprintf("%.2f x 1,000 = %.0f requests", per, 1000*per)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%s\t%s\t%d\t%s\n", p.name, window.Round(time.Second), len(p.reqs), per, strings.Join(parts, ", "), spread, peak, scaled)
	}
	w.Flush()
	return b.String()
}
