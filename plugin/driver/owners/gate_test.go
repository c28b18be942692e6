package owners_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/rdmans"
)

const node = "node-1"

// setEFACapacity sets the node's vpc.amazonaws.com/efa capacity, as AWS's
// EFA device plugin does; "" removes it.
func setEFACapacity(t *testing.T, client *fake.Clientset, q string) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	n.Status.Capacity = corev1.ResourceList{}
	if q != "" {
		n.Status.Capacity[resources.DevicePluginResource] = resource.MustParse(q)
	}
	_, err = client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// watched is a NodeWatch of node over client, run until the test ends;
// changed receives a value whenever the watch says the Node changed.
func watched(t *testing.T, client *fake.Clientset) (w *owners.NodeWatch, changed chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w = owners.NewNodeWatch(client, node)
	changed = make(chan struct{}, 100)
	go w.Run(ctx, func() { changed <- struct{}{} })
	_, err := w.Get(ctx)
	require.NoError(t, err)
	return w, changed
}

// wait waits for a value of ch.
func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// gauge is a gauge's value.
func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

// nodeEvents are the Events written so far by reason.
func nodeEvents(t *testing.T, client *fake.Clientset) map[string][]corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string][]corev1.Event{}
	for _, e := range l.Items {
		out[e.Reason] = append(out[e.Reason], e)
	}
	return out
}

// TestEventsStandAside: standing aside beside AWS's EFA device plugin, and
// ceasing to, are Events on the Node, written once each, and the metric
// says why while it lasts.
func TestEventsStandAside(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	setEFACapacity(t, client, "32")
	w, changed := watched(t, client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	m := metrics.New()
	g := owners.NewGate(owners.Node(w, false), owners.GateOptions{Metrics: m, Events: rec})

	assert.Contains(t, g.Decide(ctx), "vpc.amazonaws.com/efa")
	require.Eventually(t, func() bool { return len(nodeEvents(t, client)["EFAStandingAside"]) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := nodeEvents(t, client)["EFAStandingAside"][0]
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Message, "vpc.amazonaws.com/efa")
	assert.Equal(t, 1.0, gauge(t, m.StandingAside.WithLabelValues("device-plugin")))
	assert.Contains(t, g.Decide(ctx), "vpc.amazonaws.com/efa")
	assert.Contains(t, g.Decide(ctx), "vpc.amazonaws.com/efa")

	setEFACapacity(t, client, "")
	wait(t, changed, "change told when the device plugin left")
	assert.Empty(t, g.Decide(ctx))
	require.Eventually(t, func() bool { return len(nodeEvents(t, client)["EFAPublishing"]) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, corev1.EventTypeNormal, nodeEvents(t, client)["EFAPublishing"][0].Type)
	assert.Never(t, func() bool {
		aside := nodeEvents(t, client)["EFAStandingAside"]
		return len(aside) != 1 || aside[0].Count != 1
	}, 300*time.Millisecond, 10*time.Millisecond, "written (and counted) when it started, not at every check")
	assert.Equal(t, 0.0, gauge(t, m.StandingAside.WithLabelValues("device-plugin")))
}

// TestStandAsideKeepsDecision: a check that cannot read the Node (it is
// gone from the watch) never clears the stand-aside beside AWS's EFA
// device plugin; the Node made again is told by the watch, and the next
// check publishes.
func TestStandAsideKeepsDecision(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	setEFACapacity(t, client, "32")
	w, changed := watched(t, client)
	check := owners.Node(w, false)
	g := owners.NewGate(check, owners.GateOptions{Metrics: metrics.New()})
	ctx := context.Background()
	why := g.Decide(ctx)
	assert.Contains(t, why, "vpc.amazonaws.com/efa")

	// The Node is deleted: the check cannot tell, and the decision stands.
	nodeObj, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, err := check(ctx); return err != nil }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, why, g.Decide(ctx), "still standing aside")

	// The Node is back, without the device plugin: the watch says so (the
	// plugin checks again at once), and the check publishes.
	for len(changed) > 0 {
		<-changed
	}
	nodeObj.ResourceVersion = ""
	nodeObj.Status.Capacity = nil
	_, err = client.CoreV1().Nodes().Create(ctx, nodeObj, metav1.CreateOptions{})
	require.NoError(t, err)
	wait(t, changed, "change told when the Node was made again")
	assert.Empty(t, g.Decide(ctx))
}

// TestNodeWatchTellsOwnerSigns: the watch tells of a change to what the
// owner check reads (the device plugin's capacity, the Auto Mode label),
// not of any other change to the Node.
func TestNodeWatchTellsOwnerSigns(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	_, changed := watched(t, client)
	ctx := context.Background()
	update := func(f func(*corev1.Node)) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(t, err)
		f(n)
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	update(func(n *corev1.Node) { n.Annotations = map[string]string{"a": "b"} })
	setEFACapacity(t, client, "32")
	wait(t, changed, "change told for the device plugin's capacity")
	assert.Empty(t, changed, "an annotation is no owner sign")
	update(func(n *corev1.Node) { n.Labels = map[string]string{resources.AutoModeLabel: resources.AutoModeValue} })
	wait(t, changed, "change told for the Auto Mode label")
	update(func(n *corev1.Node) { n.Annotations = map[string]string{"a": "c"} })
	time.Sleep(200 * time.Millisecond)
	assert.Empty(t, changed, "an annotation is no owner sign")
}

// TestStandAsideBeforeAnyAnswer: a check that has never answered (the API
// server does not) stands aside, saying so, and asks to check again in
// 5-10 s; once it answered, a failed check keeps the last decision.
func TestStandAsideBeforeAnyAnswer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fail := true
	check := func(context.Context) (owners.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return owners.Verdict{}, errors.New("connection refused")
		}
		return owners.Verdict{}, nil
	}
	var asked []time.Duration
	m := metrics.New()
	g := owners.NewGate(check, owners.GateOptions{Metrics: m, AskAfter: func(d time.Duration) { asked = append(asked, d) }})
	ctx := context.Background()
	assert.Contains(t, g.Decide(ctx), "cannot tell yet whether another owner has this node's EFAs: connection refused")
	require.Len(t, asked, 1)
	assert.GreaterOrEqual(t, asked[0], 5*time.Second)
	assert.LessOrEqual(t, asked[0], 10*time.Second)
	assert.Equal(t, 1.0, gauge(t, m.StandingAside.WithLabelValues("api")))

	mu.Lock()
	fail = false
	mu.Unlock()
	assert.Empty(t, g.Decide(ctx))
	assert.Equal(t, 0.0, gauge(t, m.StandingAside.WithLabelValues("api")))
	mu.Lock()
	fail = true
	mu.Unlock()
	assert.Empty(t, g.Decide(ctx), "the last decision stands")
	assert.Len(t, asked, 1, "no more asking once it answered")
}

// TestStandAsideForAnotherDRANet: ResourceSlices of dra.net on the node
// that efakit did not write (AWS's DRA driver) make the check stand aside,
// naming them, and efakit's own do not; so does an EKS Auto Mode node.
func TestStandAsideForAnotherDRANet(t *testing.T) {
	t.Parallel()
	nodeName := node
	kind, rdma := resources.KindEFA, "rdmap79s0"
	own := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-dra.net-abcde"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "dra.net", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "efa-0000-4f-00-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{resources.AttrKind: {StringValue: &kind}}}},
	}}
	foreign := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dranet-node-1"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "dra.net", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "rdmap79s0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"rdmaDevice": {StringValue: &rdma}}}},
	}}
	slices := []resourceapi.ResourceSlice{own}
	var mu sync.Mutex
	source := func(context.Context) ([]resourceapi.ResourceSlice, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices, nil
	}
	g := owners.NewGate(owners.Publishers(source, "dra.net", node), owners.GateOptions{Metrics: metrics.New()})
	ctx := context.Background()
	assert.Empty(t, g.Decide(ctx), "efakit's own slice")
	mu.Lock()
	slices = append(slices, foreign)
	mu.Unlock()
	assert.Equal(t, "another dra.net driver publishes on node node-1 (ResourceSlice dranet-node-1 (pool node-1, device rdmap79s0)): two publishers of one driver name fight over the node's slices; remove one of them",
		g.Decide(ctx))

	t.Run("EKS Auto Mode", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{"eks.amazonaws.com/compute-type": "auto"}}})
		w, _ := watched(t, client)
		g := owners.NewGate(owners.All(owners.Node(w, true), owners.Publishers(source, "dra.net", node)), owners.GateOptions{Metrics: metrics.New()})
		assert.Contains(t, g.Decide(context.Background()), "EKS Auto Mode node")
	})
}

// TestLogNetnsUnknownOnce: an RDMA namespace mode the kernel cannot tell
// is logged once, not at every check, and again only when it changes.
func TestLogNetnsUnknownOnce(t *testing.T) {
	t.Parallel()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	live := &switchLive{err: errors.New("netlink: protocol not supported")}
	check := owners.Netns(live)
	for range 5 {
		v, err := check(ctx)
		require.NoError(t, err)
		assert.Empty(t, v.Reason)
	}
	live.err = nil
	_, _ = check(ctx)
	live.err = errors.New("netlink: permission denied")
	_, _ = check(ctx)
	_, _ = check(ctx)
	var msgs []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		msgs = append(msgs, e.Message)
	}
	assert.Equal(t, []string{"RDMA namespace mode unknown; taking the kernel's default", "RDMA namespace mode known again",
		"RDMA namespace mode unknown; taking the kernel's default"}, msgs)
}

type switchLive struct{ err error }

func (s *switchLive) RDMANetnsMode() (rdmans.Mode, error) { return rdmans.Shared, s.err }
