package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// counterFile is the counter file rel (under the RDMA device's directory:
// "hw_counters/no_completion_cmds", "ports/1/hw_counters/rdma_read_wr_err")
// of the EFA at addr in the plugin's unpacked tree of fixture.
func (n *realNode) counterFile(t *testing.T, fixture, addr, rel string) string {
	t.Helper()
	var found string
	root := n.Unpack(fixture)
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/"+addr+"/infiniband/") && strings.HasSuffix(p, "/"+rel) {
			found = p
		}
		return nil
	}))
	require.NotEmpty(t, found, "%s of %s", rel, addr)
	return found
}

// advance adds by to the counter in file, as the efa driver's counters
// move.
func advance(t *testing.T, file string, by uint64) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, "%d\n", v+by), 0o644))
}

// keepAdvancing adds by to the counter in file every period, as errors
// that go on, until the returned stop is called.
func keepAdvancing(t *testing.T, file string, by uint64, period time.Duration) (stop func()) {
	t.Helper()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			advance(t, file, by)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// taintsOf are the published device's taints as key=value:effect.
func (n *realNode) taintsOf(t *testing.T, dev string) []string {
	var out []string
	for _, tt := range n.PublishedEFAs(t)[dev].Taints {
		out = append(out, fmt.Sprintf("%s=%s:%s", tt.Key, tt.Value, tt.Effect))
	}
	return out
}

// TestRealNodeHealthWithoutStream: a kubelet without ResourceHealthStatus
// (off by default before 1.36; ResourceHealthStatusMessage, which needs
// it, off too) never opens the health stream; the plugin's
// own health checks still find a port gone DOWN and taint its EFA within
// one health interval, and lift the taint when it is ACTIVE again.
func TestRealNodeHealthWithoutStream(t *testing.T) {
	c := harness.APIServer(t)
	n := startRealNodeWith(t, c, harness.NodeOptions{KubeletGates: map[string]bool{"ResourceHealthStatus": false, "ResourceHealthStatusMessage": false}})
	const interval = 2 * time.Second
	// No periodic rescan for an hour, and a port's state sends no
	// uevent: only the health checks can find the port DOWN.
	n.StartEFAKit(p5Fixture, "--set", "healthInterval="+interval.String(), "--set", "rescanInterval=1h")
	n.WaitEFAs(t, 32)

	const addr, dev = "0000:50:00.0", "efa-0000-50-00-0"
	state := n.portState(t, p5Fixture, addr)
	require.NoError(t, os.WriteFile(state, []byte("1: DOWN\n"), 0o644))
	start := time.Now()
	harness.Eventually(t, func() bool { return len(n.taintsOf(t, dev)) == 1 }, 30*time.Second, 50*time.Millisecond,
		func() string { return "no taint; plugin log:\n" + n.LogTail("efakit-plugin", 3000) })
	took := time.Since(start)
	t.Logf("tainted %s after the port went DOWN (health interval %s): %v", took.Round(time.Millisecond), interval, n.taintsOf(t, dev))
	assert.Equal(t, []string{"dra.net/unhealthy=port-not-active:NoSchedule"}, n.taintsOf(t, dev))
	// One interval, and the publish's round trip with slack for a busy
	// machine: far below the hour's rescan that would otherwise find it.
	assert.Less(t, took, interval+8*time.Second, "within one health interval (and the publish)")
	assert.NotContains(t, n.PluginLog(), "The kubelet reads the devices' health", "this kubelet never opened the stream")

	require.NoError(t, os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644))
	harness.Eventually(t, func() bool { return len(n.taintsOf(t, dev)) == 0 }, 30*time.Second, 50*time.Millisecond,
		func() string { return fmt.Sprint(n.taintsOf(t, dev)) })
}

// TestRealNodeGradedHealth: a pod runs with four EFAs in one request; the
// third one's counters advance under it, as the efa driver's do.
// Work-request errors past their limit make it Degraded, an admin command
// without completion Unhealthy, and a window without either Healthy
// again. At each grade: the slice's taint (effect None, then NoSchedule),
// the claim's Healthy condition, the pod's
// status.containerStatuses[].allocatedResourcesStatus (the kubelet's
// health stream: one entry per EFA, the third's grade in its own), and an
// Event on the Node, as kubectl shows them. Then the efa module reloads
// under the running pod (driver-reload).
func TestRealNodeGradedHealth(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.StartEFAKit(p5Fixture, "--set", "healthInterval=1s", "--set", "health.window=20s", "--set", "logVerbosity=4")
	n.WaitEFAs(t, 32)
	published := n.PublishedEFAs(t)
	ctx := context.Background()
	four := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "four-efas", Namespace: harness.NodeNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "efas", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: resources.DefaultDeviceClass, Count: 4}}}}}}}
	_, err := c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, four, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))

	printed, claims := n.run(t, n.PrinterPod("graded", harness.TemplateClaim("efas", "four-efas")))
	require.Len(t, printed.Nodes, 4)
	claim := claims["efas"].Name
	results := claims["efas"].Status.Allocation.Devices.Results
	require.Len(t, results, 4)
	n.waitEntries(t, claim, 4)
	// The third EFA of the request, as the allocation and the kubelet
	// list them.
	dev := results[2].Device
	addr := *published[dev].Attributes[resources.AttrPCIAddr].StringValue
	assert.Contains(t, n.PluginLog(), "The kubelet reads the devices' health", "this kubelet holds the stream")

	// podHealth is the pod's health entries of the request, by the
	// device each names: its own CDI device, dra.net/efa=<claim UID>-efas_<device>.
	podHealth := func() map[string][2]string {
		p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "graded", metav1.GetOptions{})
		require.NoError(t, err)
		out := map[string][2]string{}
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					_, d, ok := strings.Cut(string(r.ResourceID), "-efas_")
					if rs.Name != "claim:efas" || !ok || !strings.HasPrefix(string(r.ResourceID), "dra.net/efa=") {
						continue
					}
					msg := ""
					if r.Message != nil {
						msg = *r.Message
					}
					out[d] = [2]string{string(r.Health), msg}
				}
			}
		}
		return out
	}
	// What kubectl shows at each grade.
	views := func(grade string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "--- %s: kubectl get resourceslice (device %s) -o yaml | grep -A4 taints:\n", grade, dev)
		taints, err := yaml.Marshal(n.PublishedEFAs(t)[dev].Taints)
		require.NoError(t, err)
		b.Write(taints)
		fmt.Fprintf(&b, "--- kubectl get resourceclaim %s -o yaml (status.devices[2].conditions):\n", claim)
		conds, err := yaml.Marshal(n.statusEntries(t, claim)[dev].Conditions)
		require.NoError(t, err)
		b.Write(conds)
		p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "graded", metav1.GetOptions{})
		require.NoError(t, err)
		fmt.Fprintf(&b, "--- kubectl get pod graded -o yaml (status.containerStatuses[0].allocatedResourcesStatus):\n")
		st, err := yaml.Marshal(p.Status.ContainerStatuses[0].AllocatedResourcesStatus)
		require.NoError(t, err)
		b.Write(st)
		fmt.Fprintf(&b, "--- efakit_plugin_device_health: %v\n", n.scrape(t, "efakit_plugin_device_health"))
		fmt.Fprintf(&b, "--- scans: %v, EFA read timeouts: %v\n", n.scrape(t, "efakit_plugin_scan_seconds_count"), n.scrape(t, "efakit_efa_read_timeouts_total"))
		for _, m := range n.scrape(t, "efakit_efa_rdma_read_work_request_errors_total") {
			if m["pci_address"] == addr {
				fmt.Fprintf(&b, "--- rdma_read_wr_err as exported: %v\n", m)
			}
		}
		var lines, graded []string
		for _, l := range strings.Split(n.PluginLog(), "\n") {
			switch {
			case strings.Contains(l, "\"Graded\""):
				graded = append(graded, l)
			case !strings.Contains(l, "Rescanning"):
				lines = append(lines, l)
			}
		}
		if len(graded) > 3 {
			graded = graded[len(graded)-3:]
		}
		fmt.Fprintf(&b, "--- plugin log, scans left out:\n%s\n--- the last checks:\n%s\n", harness.LastBytes(strings.Join(lines, "\n"), 5000), strings.Join(graded, "\n"))
		return b.String()
	}
	condition := func() metav1.Condition {
		return conditionOf(n.statusEntries(t, claim)[dev], claimstatus.TypeHealthy)
	}
	// grade waits until the third EFA shows the grade everywhere, and the
	// pod's status shows every other EFA of the request Healthy, each in
	// an entry of its own.
	grade := func(name, taint, reason, healthNow, msgPrefix string, since time.Time, after string) {
		t.Helper()
		harness.Eventually(t, func() bool {
			tt := n.taintsOf(t, dev)
			h := podHealth()
			cond := condition()
			if len(h) != 4 || fmt.Sprint(tt) != taint || cond.Reason != reason || h[dev][0] != healthNow || !strings.HasPrefix(h[dev][1], msgPrefix) {
				return false
			}
			for _, r := range results {
				if r.Device != dev && h[r.Device][0] != "Healthy" {
					return false
				}
			}
			return true
		}, 90*time.Second, 200*time.Millisecond, func() string { return views(name) })
		took := time.Since(since)
		v := views(name)
		t.Logf("%s in the pod's status, taint and claim %s after %s\n%s", name, took.Round(100*time.Millisecond), after, v[:strings.Index(v, "--- efakit_plugin_device_health")])
	}

	// Degraded: RDMA reads fail, 4 every 2 s (the limit is 10 within the
	// window of 20 s), while the pod runs.
	since := time.Now()
	stopReads := keepAdvancing(t, n.counterFile(t, p5Fixture, addr, "ports/1/hw_counters/rdma_read_wr_err"), 4, 2*time.Second)
	grade("Degraded", "[dra.net/degraded=work-request-errors:None]", "WorkRequestErrors", "Unhealthy", "degraded: ", since, "the reads began to fail")
	assert.Equal(t, metav1.ConditionFalse, condition().Status)
	assert.Contains(t, condition().Message, "failed RDMA work requests in 20s (limit 10)")

	// Unhealthy: the device's admin queue stops answering its driver.
	since = time.Now()
	stopAdmin := keepAdvancing(t, n.counterFile(t, p5Fixture, addr, "hw_counters/no_completion_cmds"), 1, 5*time.Second)
	grade("Unhealthy", "[dra.net/unhealthy=admin-timeouts:NoSchedule]", "AdminTimeouts", "Unhealthy", "", since, "the admin timeouts began")
	assert.Contains(t, condition().Message, "admin commands without completion in 20s (limit 1)")

	// Neither counter moves for a window: Healthy again.
	stopReads()
	stopAdmin()
	grade("Healthy again", "[]", "Healthy", "Healthy", "", time.Now(), "the counters stopped")
	assert.Equal(t, metav1.ConditionTrue, condition().Status)

	deviceEvents := func() map[string]string {
		evs, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n.Name})
		require.NoError(t, err)
		seen := map[string]string{}
		for _, e := range evs.Items {
			if e.Annotations[events.AnnotationDevice] != "" {
				seen[e.Annotations[events.AnnotationDevice]+" "+e.Reason] = e.Type + ": " + e.Message
			}
		}
		return seen
	}
	seen := deviceEvents()
	t.Logf("kubectl events --for node/%s (device %s): %v", n.Name, dev, seen)
	assert.Contains(t, seen[dev+" "+events.ReasonDegraded], corev1.EventTypeWarning+": EFA "+dev)
	assert.Contains(t, seen[dev+" "+events.ReasonDegraded], "failed RDMA work requests in 20s (limit 10); still allocated")
	assert.Contains(t, seen[dev+" "+events.ReasonUnhealthy], "admin commands without completion in 20s (limit 1)")
	assert.Contains(t, seen[dev+" "+events.ReasonUnhealthy], "kept out of new allocations")
	assert.Contains(t, seen[dev+" "+events.ReasonHealthy], "is healthy again")

	// The pod ran on through every grade: no grade but NoExecute evicts.
	p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "graded", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodRunning, p.Status.Phase)

	t.Run("driver-reload", func(t *testing.T) {
		n.checkDriverReload(t, "graded", claim, results)
	})
}

// TestRealNodeDeviceTaintRule: an admin drains a node's EFAs with a
// DeviceTaintRule (effect NoExecute) while the plugin taints one of them
// itself. Through the real API server, scheduler, controller manager and
// kubelet: the pod on an EFA of the node, without a toleration, is
// evicted; a claim that tolerates the admin's taint is still allocated,
// but never the EFA the plugin found unhealthy; the plugin's scans and
// publishes leave the rule as the admin wrote it; deleting the rule
// undoes the drain, and the plugin's own taint stays.
func TestRealNodeDeviceTaintRule(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.StartEFAKit(p5Fixture, "--set", "healthInterval=1s")
	n.WaitEFAs(t, 32)
	ctx := context.Background()
	claims := c.Client.ResourceV1().ResourceClaims(harness.NodeNS)

	// The plugin's own taint: 0000:50:00.0's port DOWN.
	const downDev = "efa-0000-50-00-0"
	require.NoError(t, os.WriteFile(n.portState(t, p5Fixture, "0000:50:00.0"), []byte("1: DOWN\n"), 0o644))
	harness.Eventually(t, func() bool { return len(n.taintsOf(t, downDev)) == 1 }, 30*time.Second, 50*time.Millisecond,
		func() string { return fmt.Sprint(n.taintsOf(t, downDev)) })

	at := func(name, addr string, tolerate bool) *resourceapi.ResourceClaim {
		req := resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 1}
		if addr != "" {
			req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.attributes["dra.net"].pciAddress == "` + addr + `"`}}}
		}
		if tolerate {
			// With its effect: the eviction controller heeds only a
			// toleration that names NoExecute (an empty effect, which the
			// scheduler takes for every effect, does not stop an eviction).
			req.Tolerations = []resourceapi.DeviceToleration{{Key: "example.com/drain", Operator: resourceapi.DeviceTolerationOpExists,
				Effect: resourceapi.DeviceTaintEffectNoExecute}}
		}
		cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.NodeNS}}
		cl.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &req}}
		_, err := claims.Create(ctx, cl, metav1.CreateOptions{})
		require.NoError(t, err)
		return cl
	}
	// The claims go when the test ends (their pods are gone by then), so
	// that another run on this control plane starts without them.
	names := []string{"victim", "untolerated", "tolerated", "tolerated-any"}
	removeClaims := func() {
		for _, name := range names {
			_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
		}
		harness.Eventually(t, func() bool {
			l, err := claims.List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, cl := range l.Items {
				if slices.Contains(names, cl.Name) {
					return false
				}
			}
			return true
		}, 60*time.Second, 200*time.Millisecond, func() string { return "the test's claims not gone" })
	}
	removeClaims()
	t.Cleanup(removeClaims)
	at("victim", "0000:4f:00.0", false)
	n.run(t, n.PrinterPod("victim", sharedClaim("efa", "victim")))

	// The admin drains every EFA of the node.
	driver, pool := "dra.net", n.Name
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "drain-" + n.Name},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: &driver, Pool: &pool},
			Taint:          resourceapi.DeviceTaint{Key: "example.com/drain", Value: "maintenance", Effect: resourceapi.DeviceTaintEffectNoExecute},
		}}
	rule, err := c.Client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
	})
	start := time.Now()
	harness.Eventually(t, func() bool {
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "victim", metav1.GetOptions{})
		return err != nil
	}, 90*time.Second, 200*time.Millisecond, func() string { return "the pod without a toleration still exists" })
	t.Logf("pod evicted %s after the DeviceTaintRule", time.Since(start).Round(100*time.Millisecond))

	// The plugin goes on scanning and publishing: its port comes back
	// ACTIVE (a publish that lifts its own taint), then goes DOWN again.
	require.NoError(t, os.WriteFile(n.portState(t, p5Fixture, "0000:50:00.0"), []byte("4: ACTIVE\n"), 0o644))
	harness.Eventually(t, func() bool { return len(n.taintsOf(t, downDev)) == 0 }, 30*time.Second, 50*time.Millisecond, func() string { return fmt.Sprint(n.taintsOf(t, downDev)) })
	require.NoError(t, os.WriteFile(n.portState(t, p5Fixture, "0000:50:00.0"), []byte("1: DOWN\n"), 0o644))
	harness.Eventually(t, func() bool { return len(n.taintsOf(t, downDev)) == 1 }, 30*time.Second, 50*time.Millisecond, func() string { return fmt.Sprint(n.taintsOf(t, downDev)) })
	now, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, rule.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, rule.Spec, now.Spec, "the admin's rule as written")
	for _, m := range now.ManagedFields {
		assert.NotContains(t, m.Manager, "efakit", "the plugin never writes the rule")
	}
	y, _ := yaml.Marshal(now.Status)
	t.Logf("kubectl get devicetaintrule %s -o yaml (status):\n%s", rule.Name, y)
	for dev, d := range n.PublishedEFAs(t) {
		for _, tt := range d.Taints {
			assert.Equal(t, "dra.net/unhealthy", tt.Key, "%s: the slices hold only the plugin's taints", dev)
		}
	}

	// A claim without a toleration gets no EFA of the node; one that
	// tolerates the drain gets one, never the EFA the plugin tainted.
	at("untolerated", "", false)
	at("tolerated", "0000:50:00.0", true)
	at("tolerated-any", "", true)
	for _, name := range []string{"untolerated", "tolerated", "tolerated-any"} {
		pod := n.PrinterPod(name, sharedClaim("efa", name))
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	harness.Eventually(t, func() bool {
		cl, err := claims.Get(ctx, "tolerated-any", metav1.GetOptions{})
		return err == nil && cl.Status.Allocation != nil
	}, 60*time.Second, 200*time.Millisecond, func() string {
		var b strings.Builder
		pods, err := c.Client.CoreV1().Pods(harness.NodeNS).List(ctx, metav1.ListOptions{})
		fmt.Fprintf(&b, "claim tolerated-any not allocated; pods (%v):\n", err)
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  %s %s %+v\n", p.Name, p.Status.Phase, p.Status.Conditions)
		}
		cls, err := claims.List(ctx, metav1.ListOptions{})
		fmt.Fprintf(&b, "claims (%v):\n", err)
		for _, cl := range cls.Items {
			fmt.Fprintf(&b, "  %s allocated=%t reservedFor=%v\n", cl.Name, cl.Status.Allocation != nil, cl.Status.ReservedFor)
		}
		for _, comp := range []string{"kube-scheduler", "kube-controller-manager"} {
			var lines []string
			for _, l := range strings.Split(c.LogTail(comp, 1<<22), "\n") {
				if strings.Contains(l, "tolerated") || strings.Contains(l, "drain") || strings.Contains(l, "victim") {
					lines = append(lines, l)
				}
			}
			fmt.Fprintf(&b, "%s log about them:\n%s\n", comp, harness.LastBytes(strings.Join(lines, "\n"), 4000))
		}
		return b.String()
	})
	n.waitPrinted(t, "tolerated-any")
	for _, name := range []string{"untolerated", "tolerated"} {
		harness.Eventually(t, func() bool {
			p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
					return true
				}
			}
			return false
		}, 60*time.Second, 200*time.Millisecond, func() string { return name + " not found unschedulable" })
	}
	got, err := claims.Get(ctx, "tolerated-any", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.Status.Allocation)
	assert.NotEqual(t, downDev, got.Status.Allocation.Devices.Results[0].Device)

	// The drain ends: the untolerated claim is allocated; the plugin's
	// own taint still keeps the DOWN EFA from the claim that asks for it.
	require.NoError(t, c.Client.ResourceV1().DeviceTaintRules().Delete(ctx, rule.Name, metav1.DeleteOptions{}))
	n.waitPrinted(t, "untolerated")
	time.Sleep(3 * time.Second)
	cl, err := claims.Get(ctx, "tolerated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, cl.Status.Allocation, "the plugin's NoSchedule taint holds after the admin's rule is gone")
	for _, name := range []string{"untolerated", "tolerated", "tolerated-any"} {
		n.deletePod(t, name)
	}
}
