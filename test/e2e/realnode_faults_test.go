package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// Faults on the real node, each as a user meets it: what the pods and the
// kubelet show, and that nothing is prepared twice or left behind.

var (
	uverbsIn = regexp.MustCompile(`\buverbs(\d+)\b`)
	// sliceLists are the plugin's log lines of a ResourceSlice informer's
	// (re)list, logged at -v=2.
	sliceLists = regexp.MustCompile(`(?m)"Caches populated".* type="\*v1\.ResourceSlice"`)
)

// renumberUverbs changes the plugin's unpacked tree of fixture as an efa
// or ib_uverbs module reload leaves sysfs: uverbs<a> becomes uverbs<to[a]>
// (the device's directory, its character device number, the class link),
// in place: the plugin holds the tree's root open.
func (n *realNode) renumberUverbs(t *testing.T, fixture string, to map[int]int) {
	t.Helper()
	dir := n.Unpack(fixture)
	num := func(name string) (int, bool) {
		m := uverbsIn.FindStringSubmatch(name)
		if m == nil || m[0] != name {
			return 0, false
		}
		v, _ := strconv.Atoi(m[1])
		_, ok := to[v]
		return v, ok
	}
	re := func(s string) string {
		return uverbsIn.ReplaceAllStringFunc(s, func(m string) string {
			v, _ := strconv.Atoi(strings.TrimPrefix(m, "uverbs"))
			if w, ok := to[v]; ok {
				return fmt.Sprintf("uverbs%d", w)
			}
			return m
		})
	}
	var paths []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, ok := num(d.Name()); ok {
			paths = append(paths, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	}))
	require.NotEmpty(t, paths)
	// Two steps, so that uverbs0 -> uverbs1 and uverbs1 -> uverbs0 in
	// one directory do not meet.
	const aside = ".renumbering"
	for _, p := range paths {
		require.NoError(t, os.Rename(p, p+aside))
	}
	for _, p := range paths {
		v, _ := num(filepath.Base(p))
		next := filepath.Join(filepath.Dir(p), fmt.Sprintf("uverbs%d", to[v]))
		if target, err := os.Readlink(p + aside); err == nil {
			require.NoError(t, os.Remove(p+aside))
			require.NoError(t, os.Symlink(re(target), next))
			continue
		}
		require.NoError(t, os.Rename(p+aside, next))
		require.NoError(t, os.WriteFile(filepath.Join(next, "dev"), []byte(fmt.Sprintf("231:%d\n", 192+to[v])), 0o644))
	}
}

// nodeShell runs a shell script in the node's mount namespace.
func (n *realNode) nodeShell(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.Holder.Process.Pid), "-m", "--", "sh", "-c", script).CombinedOutput()
	require.NoError(t, err, "%s: %s", script, out)
	return string(out)
}

// readyz is the plugin's readiness: the status code and the body.
func (n *realNode) readyz(t *testing.T) (int, string) {
	resp, err := http.Get(n.PluginHTTP + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// podEvents are the messages of the Events about a pod.
func (n *realNode) podEvents(name string) []string {
	ev, err := n.CP.Client.CoreV1().Events(harness.NodeNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ev.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// nodeEvents are the messages of the Events of a reason about the Node.
func (n *realNode) nodeEvents(reason string) []string {
	return n.eventMessages(metav1.NamespaceDefault, "involvedObject.kind=Node,reason="+reason)
}

// eventMessages are the messages of the Events in namespace ns that the
// field selector picks.
func (n *realNode) eventMessages(ns, selector string) []string {
	ev, err := n.CP.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ev.Items {
		out = append(out, e.Message)
	}
	return out
}

// prepared is the plugin's checkpoint: the prepared claims by UID.
func (n *realNode) prepared(t *testing.T) map[string]checkpoint.Claim {
	t.Helper()
	id, err := os.ReadFile(filepath.Join(n.Dir, "proc/sys/kernel/random/boot_id"))
	require.NoError(t, err)
	st, err := checkpoint.NewStore(filepath.Join(n.Kubelet, "plugins", resources.DefaultDriverName)).Load(strings.TrimSpace(string(id)))
	require.NoError(t, err)
	return st.Claims
}

// specs lists the claim UIDs with a dra.net CDI spec, and the other files
// of the CDI directory whose name is dra.net's (temporary files).
func (n *realNode) specs(t *testing.T) (uids, other []string) {
	t.Helper()
	w, err := cdi.NewWriter(n.CDI, resources.DefaultDriverName)
	require.NoError(t, err)
	f, err := w.List()
	require.NoError(t, err)
	for uid := range f.Metadata {
		other = append(other, "metadata of "+uid)
	}
	sort.Strings(other)
	return f.Specs, append(f.Temp, other...)
}

// preparedMismatch says how the plugin's state differs from the node's
// pods ("" when it does not): the plugin must hold exactly the claims of
// the node's running pods (by the API), each with the EFAs it is allocated, no EFA
// in two claims, a spec for each claim and no other, no temporary file.
func (n *realNode) preparedMismatch(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	pods, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	want := map[string][]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue // a pod whose prepare failed holds nothing
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			require.NoError(t, err)
			want[string(c.UID)] = allocated(resources.DefaultDriverName, c)
		}
	}
	got, holders := map[string][]string{}, map[string]string{}
	for uid, c := range n.prepared(t) {
		var devs []string
		for _, d := range c.Devices {
			devs = append(devs, d.Device)
			if other, taken := holders[d.PCIAddress]; taken {
				return fmt.Sprintf("EFA %s prepared for claims %s and %s", d.PCIAddress, other, uid)
			}
			holders[d.PCIAddress] = uid
		}
		sort.Strings(devs)
		got[uid] = devs
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Sprintf("the node's pods' claims %v, the plugin holds %v", want, got)
	}
	var uids []string
	for uid := range want {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	specs, other := n.specs(t)
	sort.Strings(specs)
	if fmt.Sprint(uids) != fmt.Sprint(specs) {
		return fmt.Sprintf("specs of claims %v, want %v", specs, uids)
	}
	for _, o := range other {
		if strings.HasPrefix(o, ".") {
			return "a temporary file left: " + o
		}
	}
	return ""
}

// checkPrepared waits until the plugin's state matches the node's pods
// (see preparedMismatch): the kubelet unprepares a deleted pod's claims
// after the pod is gone from the API.
func (n *realNode) checkPrepared(t *testing.T) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if why = n.preparedMismatch(t); why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's state does not match the node's pods: %s", why)
		}
	}
}

// TestRealNodeFaults: through the real kubelet, containerd and runc, with
// pods running and starting: EFAs renumbered by a module reload while a
// pod runs; the API server gone for two minutes while pods are created,
// deleted and restarted; the API server's watch cache reset under the
// plugin's slice informer; the CDI directory full, then read-only.
func TestRealNodeFaults(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := startRealNodeWith(t, c, harness.NodeOptions{CDISize: "1m"})
	n.EnsureNamespace()
	require.Len(t, n.StartAccelDriver(p5Fixture), 8)
	n.StartEFAKit(p5Fixture)
	n.WaitEFAs(t, 32)
	harness.CreateSeed(t, c, "seed-claims.yaml")
	nodes := fixtureNodes(t, p5Fixture)

	t.Run("renumbered-while-running", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("renum", harness.TemplateClaim("efa", "single-efa-claim")))
		defer n.deletePod(t, "renum") // whatever fails: the next test finds the EFAs free
		require.Len(t, got.Nodes, 1)
		cl := claimsOf(claims)[0]
		dev := n.PublishedEFAs(t)[allocated(resources.DefaultDriverName, cl)[0]]
		addr := *dev.Attributes[resources.AttrPCIAddr].StringValue
		var mine int
		_, err := fmt.Sscanf(strings.Fields(got.Nodes[0])[0], "/dev/infiniband/uverbs%d", &mine)
		require.NoError(t, err)
		other := (mine + 1) % 32
		// ib_uverbs reloaded: this pod's EFA and another swap numbers.
		n.renumberUverbs(t, p5Fixture, map[int]int{mine: other, other: mine})
		defer func() {
			n.renumberUverbs(t, p5Fixture, map[int]int{mine: other, other: mine})
			n.rescan()
		}()
		now := fmt.Sprintf("/dev/infiniband/uverbs%d 231:%d", other, 192+other)
		n.rescan() // the scan a uevent or the next health check makes
		w, err := cdi.NewWriter(n.CDI, resources.DefaultDriverName)
		require.NoError(t, err)
		harness.Eventually(t, func() bool {
			spec, err := w.Load(string(cl.UID))
			if err != nil || len(spec.Devices) == 0 || len(spec.Devices[0].ContainerEdits.DeviceNodes) == 0 {
				return false
			}
			d := spec.Devices[0].ContainerEdits.DeviceNodes[0]
			return fmt.Sprintf("%s %d:%d", d.Path, d.Major, d.Minor) == now
		}, 30*time.Second, 100*time.Millisecond, func() string {
			return fmt.Sprintf("the claim's spec corrected while the plugin runs; plugin:\n%s", n.LogTail("efakit-plugin", 3000))
		})
		harness.Eventually(t, func() bool {
			for _, m := range n.nodeEvents(events.ReasonRenumbered) {
				if strings.Contains(m, "EFAs of claim "+harness.NodeNS+"/"+cl.Name+" renumbered") && strings.Contains(m, "pods "+harness.NodeNS+"/renum ") {
					return true
				}
			}
			return false
		}, 30*time.Second, 200*time.Millisecond, func() string {
			return fmt.Sprintf("an Event on the Node names the claim and its pod; events: %v", n.nodeEvents(events.ReasonRenumbered))
		})
		t.Logf("EFA %s renumbered from uverbs%d to uverbs%d; the Node's Event: %s", addr, mine, other, n.nodeEvents(events.ReasonRenumbered))

		// The container restarts before the plugin does: it gets its own
		// EFA under its new number, not the old one (another EFA's now).
		id, restarts := n.containerID(t, "renum")
		n.killContainer(t, id)
		n.waitRestarted(t, "renum", restarts)
		again, _ := n.waitPrinted(t, "renum")
		assert.Equal(t, []string{now}, again.Nodes, "the restarted container holds its own EFA's new number")
	})

	t.Run("api-server-down", func(t *testing.T) {
		// A minute: long enough that the clients' back-off (client-go's
		// reflectors: 0.8 s doubling, jittered up to twice, capped at 30 s)
		// reaches its cap, which is what a longer outage adds.
		// EFAKIT_API_DOWN sets another.
		down := time.Minute
		if d, err := time.ParseDuration(os.Getenv("EFAKIT_API_DOWN")); err == nil {
			down = d
		}
		_, steadyClaims := n.run(t, n.PrinterPod("steady", harness.TemplateClaim("efa", "single-efa-claim")))
		_, leavingClaims := n.run(t, n.PrinterPod("leaving", harness.TemplateClaim("efa", "single-efa-claim")))
		leaving := claimsOf(leavingClaims)[0]
		// Created and deleted just before the API server goes: the
		// kubelet is starting, preparing and stopping pods as it goes.
		zero := int64(0)
		require.NoError(t, c.Client.CoreV1().Pods(harness.NodeNS).Delete(ctx, "leaving", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		// Two on their way through the kubelet, two not yet scheduled.
		for i := range 4 {
			_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod(fmt.Sprintf("arriving-%d", i), harness.TemplateClaim("efa", "single-efa-claim")), metav1.CreateOptions{})
			require.NoError(t, err)
			if i == 1 {
				time.Sleep(700 * time.Millisecond)
			}
		}
		c.StopAPIServer()
		went := time.Now()
		// A container restarts while the API server is away: the kubelet
		// starts it again from the spec on disk.
		time.Sleep(10 * time.Second)
		steadyTask := n.podTask(t, "steady")
		n.killContainer(t, steadyTask)
		require.Eventually(t, func() bool { return n.podTask(t, "steady") != steadyTask }, 60*time.Second, 200*time.Millisecond,
			"steady's container restarted while the API server is down; kubelet:\n%s", n.LogTail("kubelet", 3000))
		time.Sleep(time.Until(went.Add(down)))
		require.NoError(t, c.StartAPIServer())
		back := time.Now()
		// How long the pods that arrived may take is Kubernetes' to say,
		// not efakit's. The claim controller retries a failed create after
		// 5 ms doubling per failure (client-go's default controller rate
		// limiter): its next try comes up to one outage after the return
		// (+20 s in a run of this test). kube-scheduler's informers back
		// off to 30 s, doubled by jitter: it scheduled the pods 59 s after
		// their claims were made in that run, 79 s after the return, and
		// more than 90 s once on a busy machine. And kube-scheduler 1.37
		// can miss a claim that arrives before its copy of the pod names
		// it (its own dynamicresources/prequeueing_race_test.go calls this
		// a known race): such a pod waits for the queue's flush of pods
		// unschedulable for 5 minutes, which runs every 30 s.
		bound := down + 5*time.Minute + 30*time.Second + 90*time.Second
		for i := range 4 {
			name := fmt.Sprintf("arriving-%d", i)
			got, claims := n.waitPrintedWithin(t, name, time.Until(back.Add(bound)))
			n.check(t, got, nodes, claimsOf(claims), nil)
		}
		t.Logf("with the API server down for %s: every pod created before it went runs %s after it came back", down, time.Since(back).Round(100*time.Millisecond))
		// Where the time after its return went, per pod (the API's
		// timestamps are whole seconds).
		for i := range 4 {
			name := fmt.Sprintf("arriving-%d", i)
			p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			var claimMade, scheduled, started time.Time
			if len(p.Status.ResourceClaimStatuses) > 0 {
				if cl, err := c.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{}); err == nil {
					claimMade = cl.CreationTimestamp.Time
				}
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled {
					scheduled = cond.LastTransitionTime.Time
				}
			}
			if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
				started = p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
			}
			rel := func(at time.Time) string {
				if at.Before(back) {
					return "before"
				}
				return "+" + at.Sub(back).Round(time.Second).String()
			}
			t.Logf("  %s: claim made %s, scheduled %s, container started %s (from the API server's return)", name, rel(claimMade), rel(scheduled), rel(started))
			if !claimMade.IsZero() && scheduled.Sub(claimMade) > 2*time.Minute {
				t.Logf("  %s waited %s for kube-scheduler after its claim was made: more than its informers' back-off, the scheduling queue's flush", name, scheduled.Sub(claimMade).Round(time.Second))
			}
		}
		require.Eventually(t, func() bool {
			_, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "leaving", metav1.GetOptions{})
			uids, _ := n.specs(t)
			gone := apierrors.IsNotFound(err)
			for _, u := range uids {
				gone = gone && u != string(leaving.UID)
			}
			return gone
		}, 2*time.Minute, 200*time.Millisecond, "the deleted pod's claim unprepared")
		_, restarts := n.containerID(t, "steady")
		assert.GreaterOrEqual(t, restarts, int32(1), "steady restarted")
		again, _ := n.waitPrinted(t, "steady")
		n.check(t, again, nodes, claimsOf(steadyClaims), nil)
		var failed []string
		for i := range 4 {
			for _, e := range n.podEvents(fmt.Sprintf("arriving-%d", i)) {
				if strings.HasPrefix(e, "FailedPrepareDynamicResources") {
					failed = append(failed, e)
				}
			}
		}
		t.Logf("what the kubelet reported for the pods that arrived: %d failed prepares%s", len(failed), strings.Join(append([]string{""}, failed...), "\n  "))
		n.checkPrepared(t)
		for _, name := range []string{"steady", "arriving-0", "arriving-1", "arriving-2", "arriving-3"} {
			n.deletePod(t, name)
		}
		n.checkPrepared(t)
	})

	t.Run("watch-reset", func(t *testing.T) {
		// The plugin's slice informer resumes its watch from the last
		// resource version it saw; with etcd compacted past it while the
		// API server was away, the answer is 410 Gone (too old), and the
		// informer lists again.
		before := n.PublishedEFAs(t)
		lists := func() int { return len(sliceLists.FindAllString(n.LogTail("efakit-plugin", 1<<30), -1)) }
		listed := lists()
		for i := range 50 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rv-%d", i)}}
			_, err := c.Client.CoreV1().ConfigMaps(harness.NodeNS).Create(ctx, cm, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		c.StopAPIServer()
		require.NoError(t, c.CompactEtcd())
		require.NoError(t, c.StartAPIServer())
		require.Eventually(t, func() bool { return lists() > listed }, 60*time.Second, 200*time.Millisecond,
			"the plugin's slice informer listed again (its watch was too old for the new watch cache: 410 Gone); plugin:\n%s", n.LogTail("efakit-plugin", 3000))
		// The informer works: a slice deleted by someone else is back.
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name})
		require.NoError(t, err)
		require.NotEmpty(t, l.Items)
		require.NoError(t, c.Client.ResourceV1().ResourceSlices().Delete(ctx, l.Items[0].Name, metav1.DeleteOptions{}))
		// The plugin has two slice informers: its watch of the node's
		// slices and the ResourceSlice controller's, which writes the
		// slice back. The first to list again ends the wait above; the
		// other may still wait out client-go's reflector backoff, which
		// grows to 30 s while the API server is away, with up to as much
		// again of jitter (k8s.io/client-go/tools/cache/reflector.go,
		// defaultBackoffMax and defaultBackoffJitter), before it lists and
		// the controller syncs (1 to 3 s).
		require.Eventually(t, func() bool { return len(n.PublishedEFAs(t)) == len(before) }, 90*time.Second, 100*time.Millisecond,
			"the deleted slice published again after the watch reset; plugin:\n%s", n.LogTail("efakit-plugin", 3000))
		got, claims := n.run(t, n.PrinterPod("after-reset", harness.TemplateClaim("efa", "single-efa-claim")))
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "after-reset")
	})

	t.Run("cdi-directory-full", func(t *testing.T) {
		n.nodeShell(t, fmt.Sprintf("cat /dev/zero > %q/filler 2>/dev/null; cat /dev/zero > %q/filler2 2>/dev/null; true", n.CDI, n.CDI))
		defer n.nodeShell(t, fmt.Sprintf("rm -f %q/filler %q/filler2", n.CDI, n.CDI))
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod("on-full", harness.TemplateClaim("efa", "single-efa-claim")), metav1.CreateOptions{})
		require.NoError(t, err)
		const why = "no space left on device (the file system is full: free space; the kubelet retries the prepare)"
		harness.Eventually(t, func() bool {
			return strings.Contains(strings.Join(n.podEvents("on-full"), "\n"), why)
		}, 60*time.Second, 200*time.Millisecond, func() string { return fmt.Sprintf("the pod's events say why; events: %v", n.podEvents("on-full")) })
		require.Eventually(t, func() bool {
			code, body := n.readyz(t)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "(its file system is full)")
		}, 30*time.Second, 200*time.Millisecond, "readiness says why")
		code, body := n.readyz(t)
		t.Logf("the pod's event: %s\n/readyz: %d %s", lastMatching(n.podEvents("on-full"), why), code, body)
		assert.NotEmpty(t, n.nodeEvents(events.ReasonStorage), "an Event on the Node")
		n.checkPrepared(t) // nothing half-written: no spec, no temporary file, no checkpoint entry
		n.nodeShell(t, fmt.Sprintf("rm -f %q/filler %q/filler2", n.CDI, n.CDI))
		// The next prepare works. (The kubelet tries the waiting pod again
		// at its next resync, 60-90 s later: the next pod shows it sooner.)
		got, claims := n.run(t, n.PrinterPod("after-full", harness.TemplateClaim("efa", "single-efa-claim")))
		n.check(t, got, nodes, claimsOf(claims), nil)
		require.Eventually(t, func() bool { code, _ := n.readyz(t); return code == http.StatusOK }, 30*time.Second, 200*time.Millisecond, "ready again")
		n.deletePod(t, "on-full")
		n.deletePod(t, "after-full")
		n.checkPrepared(t)
	})

	t.Run("cdi-directory-read-only", func(t *testing.T) {
		n.nodeShell(t, fmt.Sprintf("mount -o remount,ro %q", n.CDI))
		defer n.nodeShell(t, fmt.Sprintf("mount -o remount,rw %q", n.CDI))
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod("on-ro", harness.TemplateClaim("efa", "single-efa-claim")), metav1.CreateOptions{})
		require.NoError(t, err)
		const why = "read-only file system (the directory is read-only: make it writable; the kubelet retries the prepare)"
		harness.Eventually(t, func() bool {
			return strings.Contains(strings.Join(n.podEvents("on-ro"), "\n"), why)
		}, 60*time.Second, 200*time.Millisecond, func() string { return fmt.Sprintf("the pod's events say why; events: %v", n.podEvents("on-ro")) })
		require.Eventually(t, func() bool {
			code, body := n.readyz(t)
			return code == http.StatusServiceUnavailable && body == "cannot prepare: "+n.CDI+" is on a read-only file system"
		}, 30*time.Second, 200*time.Millisecond, "readiness says why")
		code, body := n.readyz(t)
		t.Logf("the pod's event: %s\n/readyz: %d %s", lastMatching(n.podEvents("on-ro"), why), code, body)
		n.checkPrepared(t)
		n.nodeShell(t, fmt.Sprintf("mount -o remount,rw %q", n.CDI))
		got, claims := n.run(t, n.PrinterPod("after-ro", harness.TemplateClaim("efa", "single-efa-claim")))
		n.check(t, got, nodes, claimsOf(claims), nil)
		require.Eventually(t, func() bool { code, _ := n.readyz(t); return code == http.StatusOK }, 30*time.Second, 200*time.Millisecond, "ready again")
		n.deletePod(t, "on-ro")
		n.deletePod(t, "after-ro")
		n.checkPrepared(t)
	})
}

// podTask is the runtime's ID of the running container of a pod, asked of
// containerd (the API server may be away): "" when none runs.
func (n *realNode) podTask(t *testing.T, pod string) string {
	t.Helper()
	out, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "containers", "ls", "--quiet",
		`labels."io.kubernetes.pod.name"==`+pod+`,labels."io.kubernetes.container.name"==print`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tasks, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	require.NoError(t, err, "%s", tasks)
	running := map[string]bool{}
	for _, l := range strings.Split(string(tasks), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[2] == "RUNNING" {
			running[f[0]] = true
		}
	}
	for _, id := range strings.Fields(string(out)) {
		if running[id] {
			return id
		}
	}
	return ""
}

// lastMatching is the last message that contains s.
func lastMatching(msgs []string, s string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if strings.Contains(msgs[i], s) {
			return msgs[i]
		}
	}
	return ""
}
