package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/efakit/efakit/plugin/driver/events"
)

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

// nodeEvents lists the Events written so far in namespace default.
func nodeEvents(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

// byReason is the Event of a reason and device.
func byReason(evs []corev1.Event, reason, device string) corev1.Event {
	for _, e := range evs {
		if e.Reason == reason && e.Annotations[events.AnnotationDevice] == device {
			return e
		}
	}
	return corev1.Event{}
}

// TestEventsFlappingBounded: 100 flaps of an EFA's link (an Unhealthy
// Warning and a Healthy Normal each, as the plugin records them) make a
// bounded number of API writes (the spam filter's burst per reason and
// device), and the flaps held back are counted in the next event written
// once the filter allows one again (client-go's correlator counts every
// observation). Another EFA's Events are not held back by the first's.
func TestEventsFlappingBounded(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	clock := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, "node-1", clock)
	defer rec.Stop()
	const dev = "efa-0000-50-00-0"
	down := "EFA efa-0000-50-00-0 (rdmap80s0) is unhealthy: port DOWN"
	for range 100 {
		rec.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, dev, down)
		rec.Record(corev1.EventTypeNormal, events.ReasonHealthy, dev, "EFA efa-0000-50-00-0 (rdmap80s0) is healthy again")
	}
	// Two reasons for one device, a burst of three each.
	require.Eventually(t, func() bool { return eventWrites(client) >= 2*events.SpamBurst }, 10*time.Second, 10*time.Millisecond)
	assert.Never(t, func() bool { return eventWrites(client) > 2*events.SpamBurst }, 300*time.Millisecond, 10*time.Millisecond)

	evs := nodeEvents(t, client)
	reasons := map[string]int{}
	for _, e := range evs {
		reasons[e.Reason+"/"+e.Type]++
	}
	assert.Equal(t, map[string]int{"EFAUnhealthy/Warning": 1, "EFAHealthy/Normal": 1}, reasons, "an identical Event is counted, not written again")
	assert.Equal(t, int32(events.SpamBurst), byReason(evs, events.ReasonUnhealthy, dev).Count)

	// Another EFA: its own bucket.
	rec.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, "efa-0000-4f-00-0", "EFA efa-0000-4f-00-0 (rdmap79s0) is unhealthy: port DOWN")
	require.Eventually(t, func() bool { return eventWrites(client) == 2*events.SpamBurst+1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(1), byReason(nodeEvents(t, client), events.ReasonUnhealthy, "efa-0000-4f-00-0").Count)

	// Five minutes on, one more flap is written, counting those held back.
	clock.Step(5 * time.Minute)
	rec.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, dev, down)
	require.Eventually(t, func() bool { return eventWrites(client) == 2*events.SpamBurst+2 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(101), byReason(nodeEvents(t, client), events.ReasonUnhealthy, dev).Count, "100 unhealthy turns, and this one")
}

// TestEventsNeverBlock: with an API server that does not answer event
// writes, recording goes on: it queues (1,000, then drops) and never
// waits.
func TestEventsNeverBlock(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	stuck := make(chan struct{})
	defer close(stuck)
	client.PrependReactor("*", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-stuck
		return true, nil, errors.New("no answer")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, "node-1", nil)
	defer rec.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5000 { // beyond the broadcaster's queue
			dev := fmt.Sprintf("efa-%d", i%64)
			rec.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, dev, "EFA "+dev+" is unhealthy: port DOWN")
			rec.Record(corev1.EventTypeNormal, events.ReasonHealthy, dev, "EFA "+dev+" is healthy again")
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("recording blocked on the API server")
	}
}
