package driver_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/sysfs"
)

// nodeEvents lists the Events written so far, oldest first.
func nodeEvents(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

// TestEventsHealthChange: an EFA going unhealthy is a Warning on the Node
// naming the device, its RDMA device and why, and healthy again a Normal,
// each with the device in its annotation, which keys the recorder's spam
// filter per device (driver/events' TestEventsFlappingBounded bounds a
// flapping link's writes; TestEventsNeverBlock, that recording never
// waits).
func TestEventsHealthChange(t *testing.T) {
	t.Parallel()
	up, down := edit(t, func(*sysfs.Entry) bool { return true }), portDown(t, "50")
	s := &swapFS{}
	s.cur.Store(up)
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	// Flaps are counted apart (a flapping port is degraded while up:
	// TestPortFlapsDegrade); here the port's every turn is a change.
	policy := health.DefaultPolicy()
	policy.FlapLimit = 0
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Events, o.Health.Policy = rec, policy })
	p.SetPublisher(&drivertest.Recorder{})
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	s.cur.Store(down)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	s.cur.Store(up)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(nodeEvents(t, client)) == 2 }, 10*time.Second, 10*time.Millisecond)
	assert.Never(t, func() bool { return len(nodeEvents(t, client)) > 2 }, 300*time.Millisecond, 10*time.Millisecond)
	evs := nodeEvents(t, client)
	reasons := map[string]int{}
	for _, e := range evs {
		reasons[e.Reason+"/"+e.Type]++
		assert.Equal(t, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: node}, e.InvolvedObject)
		assert.Equal(t, corev1.EventSource{Component: "efakit-plugin", Host: node}, e.Source)
		assert.Equal(t, "efa-0000-50-00-0", e.Annotations[events.AnnotationDevice])
	}
	assert.Equal(t, map[string]int{"EFAUnhealthy/Warning": 1, "EFAHealthy/Normal": 1}, reasons)
	assert.Contains(t, byReason(evs, "EFAUnhealthy").Message, "EFA efa-0000-50-00-0 (rdmap80s0) is unhealthy: port DOWN")
	assert.Contains(t, byReason(evs, "EFAHealthy").Message, "efa-0000-50-00-0")
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
