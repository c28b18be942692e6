package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
)

// Bursts of pods through the real node: Burst creates a burst's pods at
// once, waits until every one runs, deletes them and waits until the node
// is empty again, and returns when each pod passed each step of its start
// (PodTimes), from the API (the pods' and claims' watch events) and the
// kubelet's and the plugin's logs (klog timestamps, one clock). test/e2e's
// TestRealNodeBursts asserts on the bursts; bench/cluster's
// TestRealNodePodStart (make burst) prints the percentiles of the times.

// FastClient is a client of the control plane without client-go's rate
// limiter.
func (c *ControlPlane) FastClient(t *testing.T) kubernetes.Interface {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// PodTimes is when one pod of a burst passed each step.
type PodTimes struct {
	Created, Bound, Running time.Time
	// For a pod with a claim made from a template: when the claim was
	// seen made (the controller manager) and allocated (the scheduler).
	ClaimMade, Allocated time.Time
	// From the logs: the kubelet's SyncLoop ADD, and for a pod with a
	// claim the plugin's call arriving, its start and its answer.
	Kubelet, Arrived, Started, Prepared time.Time
}

// SleeperPod is a pod on the node that sleeps, with the given claims.
func (n *RealNode) SleeperPod(name, burst string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	pod := n.PrinterPod(name, claims...)
	pod.Labels = map[string]string{"burst": burst}
	// Ends at once on SIGTERM (a shell as PID 1 without a trap ignores
	// it, and the kubelet waits out the grace period).
	pod.Spec.Containers[0].Command = []string{"sh", "-c", `trap "exit 0" TERM; sleep 100000 & wait`}
	return pod
}

// Burst creates the pods at once (one goroutine each) and waits until all
// run, then deletes them and waits until they are gone, their claims
// unprepared and deleted. It returns each pod's times, by pod name.
func (n *RealNode) Burst(t *testing.T, client kubernetes.Interface, pods []*corev1.Pod) map[string]*PodTimes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	burst := pods[0].Labels["burst"]
	var mu sync.Mutex
	times := map[string]*PodTimes{}
	for _, p := range pods {
		times[p.Name] = &PodTimes{}
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
		if p.Spec.NodeName != "" && pt.Bound.IsZero() {
			pt.Bound = now
		}
		if p.Status.Phase == corev1.PodRunning && pt.Running.IsZero() {
			pt.Running = now
			running++
		}
	}
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", NodeNS, func(o *metav1.ListOptions) {
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
	claimInf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(client.ResourceV1().RESTClient(), "resourceclaims", NodeNS, fields.Everything()),
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
			made, err := client.CoreV1().Pods(NodeNS).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			times[p.Name].Created = at
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
				n.LogTail("kubelet", 4000), n.LogTail("efakit-plugin", 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	for uid, cs := range seen {
		if name, ok := uids[uid]; ok {
			times[name].ClaimMade, times[name].Allocated = cs.made, cs.allocated
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
func (n *RealNode) claimOwners(t *testing.T, client kubernetes.Interface, burst string) map[string]string {
	l, err := client.CoreV1().Pods(NodeNS).List(context.Background(), metav1.ListOptions{LabelSelector: "burst=" + burst})
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
func (n *RealNode) endBurst(t *testing.T, client kubernetes.Interface, burst string) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	require.NoError(t, client.CoreV1().Pods(NodeNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "burst=" + burst}))
	var left string
	ended := func() bool {
		l, err := client.CoreV1().Pods(NodeNS).List(ctx, metav1.ListOptions{LabelSelector: "burst=" + burst})
		if err != nil || len(l.Items) > 0 {
			left = fmt.Sprintf("pods: %d %v", len(l.Items), err)
			return false
		}
		if specs, _ := filepath.Glob(filepath.Join(n.CDI, "dra.net-*")); len(specs) > 0 {
			left = fmt.Sprintf("specs: %v", specs)
			return false
		}
		cl, err := client.ResourceV1().ResourceClaims(NodeNS).List(ctx, metav1.ListOptions{})
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
	kubeletAdd  = regexp.MustCompile(`^"SyncLoop ADD" source="api" pods=\["` + NodeNS + `/([^"]+)"\]`)
	pluginReady = regexp.MustCompile(`^"Prepared claim" .*?\bclaim="` + NodeNS + `/([^"]+)".* duration="([^"]+)" waited="([^"]+)"`)
)

// stepsFromLogs fills in, from the kubelet's and the plugin's logs since
// from, when the kubelet saw each pod and when the plugin's call for each
// claim arrived, started and answered.
func (n *RealNode) stepsFromLogs(t *testing.T, from time.Time, times map[string]*PodTimes, claimPod map[string]string) {
	scan := func(name string, line func(at time.Time, msg string)) {
		f, err := os.Open(filepath.Join(n.Dir, name+".log"))
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
			if pt := times[m[1]]; pt != nil && pt.Kubelet.IsZero() {
				pt.Kubelet = at
			}
		}
	})
	scan("efakit-plugin", func(at time.Time, msg string) {
		m := pluginReady.FindStringSubmatch(msg)
		if m == nil {
			return
		}
		pt := times[claimPod[m[1]]]
		if pt == nil || !pt.Prepared.IsZero() {
			return
		}
		took, err1 := time.ParseDuration(m[2])
		waited, err2 := time.ParseDuration(m[3])
		if err1 != nil || err2 != nil {
			return
		}
		pt.Prepared = at
		pt.Started = at.Add(-took)
		pt.Arrived = pt.Started.Add(-waited)
	})
}

// runtimeContainers lists containerd's containers (sandboxes included) of
// the pods whose names start with prefix that still have a task (a
// process): stopped ones stay listed until the kubelet's garbage
// collection removes them.
func (n *RealNode) runtimeContainers(t *testing.T, prefix string) []string {
	out, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "containers", "ls", "--quiet",
		`labels."io.kubernetes.pod.name"~="^`+regexp.QuoteMeta(prefix)+`"`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tasks, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
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
