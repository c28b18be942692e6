package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/sysfs"
)

// nodeEvents lists the Events written so far, oldest first.
func nodeEvents(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

// eventWrites counts the API writes of events (the rate limit's subject).
func eventWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "events" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetVerb() != "get" {
			n++
		}
	}
	return n
}

// TestEventsFlappingBounded: an EFA going unhealthy is a Warning on the
// Node naming the device, its RDMA device and why, and healthy again a
// Normal; 100 flaps of its link make a bounded number of API writes (the
// spam filter's burst per reason and device), and the flaps held back are
// counted in the next event written once the filter allows one again
// (client-go's correlator counts every observation).
func TestEventsFlappingBounded(t *testing.T) {
	t.Parallel()
	up, down := edit(t, func(*sysfs.Entry) bool { return true }), portDown(t, "50")
	s := &swapFS{}
	s.cur.Store(up)
	client := fake.NewClientset()
	clock := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, clock)
	defer rec.Stop()
	// Flaps are counted apart (a flapping port is degraded while up:
	// TestPortFlapsDegrade); here the port's every turn is a change.
	policy := health.DefaultPolicy()
	policy.FlapLimit = 0
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Events, o.Health.Policy = rec, policy })
	p.SetPublisher(&recorder{})
	_, err := p.Rescan(ctx)
	require.NoError(t, err)

	for range 100 {
		s.cur.Store(down)
		_, err := p.Rescan(ctx)
		require.NoError(t, err)
		s.cur.Store(up)
		_, err = p.Rescan(ctx)
		require.NoError(t, err)
	}
	// Two reasons for one device, a burst of three each.
	require.Eventually(t, func() bool { return eventWrites(client) >= 2*events.SpamBurst }, 10*time.Second, 10*time.Millisecond)
	assert.Never(t, func() bool { return eventWrites(client) > 2*events.SpamBurst }, 300*time.Millisecond, 10*time.Millisecond)

	evs := nodeEvents(t, client)
	reasons := map[string]int{}
	for _, e := range evs {
		reasons[e.Reason+"/"+e.Type]++
		assert.Equal(t, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: node}, e.InvolvedObject)
		assert.Equal(t, corev1.EventSource{Component: "efakit-plugin", Host: node}, e.Source)
		assert.Equal(t, "efa-0000-50-00-0", e.Annotations[events.AnnotationDevice])
	}
	assert.Equal(t, map[string]int{"EFAUnhealthy/Warning": 1, "EFAHealthy/Normal": 1}, reasons, "an identical Event is counted, not written again")
	unhealthy := byReason(evs, "EFAUnhealthy")
	assert.Contains(t, unhealthy.Message, "EFA efa-0000-50-00-0 (rdmap80s0) is unhealthy: port DOWN")
	assert.Equal(t, int32(events.SpamBurst), unhealthy.Count)

	// Five minutes on, one more flap is written, counting those held back.
	clock.Step(5 * time.Minute)
	s.cur.Store(down)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return eventWrites(client) == 2*events.SpamBurst+1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(101), byReason(nodeEvents(t, client), "EFAUnhealthy").Count, "100 unhealthy turns, and this one")
}

// byReason is the Event of a reason.
func byReason(evs []corev1.Event, reason string) corev1.Event {
	for _, e := range evs {
		if e.Reason == reason {
			return e
		}
	}
	return corev1.Event{}
}

// TestEventsNeverBlock: with an API server that does not answer event
// writes, scans go on: recording queues and never waits.
func TestEventsNeverBlock(t *testing.T) {
	t.Parallel()
	up, down := edit(t, func(*sysfs.Entry) bool { return true }), portDown(t, "50")
	s := &swapFS{}
	s.cur.Store(up)
	client := fake.NewClientset()
	stuck := make(chan struct{})
	defer close(stuck)
	client.PrependReactor("*", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-stuck
		return true, nil, errors.New("no answer")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Events = rec })
	p.SetPublisher(&recorder{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 40 {
			s.cur.Store(down)
			_, _ = p.Rescan(context.Background())
			s.cur.Store(up)
			_, _ = p.Rescan(context.Background())
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("scans blocked on events")
	}
}

// failingPublisher fails every publish.
type failingPublisher struct{}

func (failingPublisher) PublishResources(context.Context, resourceslice.DriverResources) error {
	return errors.New("connection refused")
}

// TestEventsPublishFailed: a failed publish is a Warning on the Node.
func TestEventsPublishFailed(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	p := newTestPlugin(t, edit(t, func(*sysfs.Entry) bool { return true }), func(o *driver.PluginOptions) { o.Events = rec })
	p.SetPublisher(failingPublisher{})
	_, err := p.Rescan(ctx)
	require.ErrorContains(t, err, "connection refused")
	require.Eventually(t, func() bool { return len(nodeEvents(t, client)) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := nodeEvents(t, client)[0]
	assert.Equal(t, "EFAPublishFailed", e.Reason)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Message, "connection refused")
}

// TestEventsStandAside: standing aside beside AWS's EFA device plugin, and
// ceasing to, are Events on the Node, written once each.
func TestEventsStandAside(t *testing.T) {
	c := claim("c", "f0000000-0000-0000-0000-0000000000e1", "efa-0000-4f-00-0")
	n := newNode(t, p5, c)
	n.setEFACapacity("32")
	n.start()
	defer n.stop()
	byReason := func() map[string][]corev1.Event {
		out := map[string][]corev1.Event{}
		for _, e := range nodeEvents(t, n.client) {
			out[e.Reason] = append(out[e.Reason], e)
		}
		return out
	}
	require.Eventually(t, func() bool { return len(byReason()["EFAStandingAside"]) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := byReason()["EFAStandingAside"][0]
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Message, "vpc.amazonaws.com/efa")
	n.rescan <- struct{}{}
	n.rescan <- struct{}{}

	n.setEFACapacity("")
	n.rescan <- struct{}{}
	require.Eventually(t, func() bool { return len(byReason()["EFAPublishing"]) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, corev1.EventTypeNormal, byReason()["EFAPublishing"][0].Type)
	assert.Len(t, byReason()["EFAStandingAside"], 1, "written when it started, not at every scan")
}
