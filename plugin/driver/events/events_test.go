package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/plugin/driver/events"
)

// written waits for n Events in namespace ns and returns them.
func written(t *testing.T, c *fake.Clientset, ns string, n int) []corev1.Event {
	t.Helper()
	var got []corev1.Event
	require.Eventually(t, func() bool {
		l, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		got = l.Items
		return len(got) >= n
	}, 10*time.Second, 10*time.Millisecond, "%d Events in %q", n, ns)
	return got
}

// recorder is a Recorder for node-1 over a fake clientset, stopped with
// the test.
func recorder(t *testing.T) (*fake.Clientset, *events.Recorder) {
	t.Helper()
	c := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	r := events.New(ctx, c, "node-1", nil)
	t.Cleanup(func() { r.Stop(); cancel() })
	return c, r
}

// TestRecordOnNode: an Event about a device goes on the Node, in
// namespace default, as the kubelet writes its own: involvedObject the
// Node with its name as UID, the source efakit-plugin on the node, the
// device in the annotation.
func TestRecordOnNode(t *testing.T) {
	t.Parallel()
	c, r := recorder(t)
	r.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, "efa-0000-4f-00-0", "EFA rdmap79s0 is unhealthy: port DOWN")
	e := written(t, c, metav1.NamespaceDefault, 1)[0]
	assert.Equal(t, "Node", e.InvolvedObject.Kind)
	assert.Equal(t, "node-1", e.InvolvedObject.Name)
	assert.Equal(t, "node-1", string(e.InvolvedObject.UID))
	assert.Equal(t, events.ReasonUnhealthy, e.Reason)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Equal(t, "efa-0000-4f-00-0", e.Annotations[events.AnnotationDevice])
	assert.Equal(t, corev1.EventSource{Component: events.EventSourceComponent, Host: "node-1"}, e.Source)
}

// TestRecordClaim: an Event about a claim's device goes on the
// ResourceClaim, in its namespace, and a message longer than the API's
// 1 kB is cut.
func TestRecordClaim(t *testing.T) {
	t.Parallel()
	c, r := recorder(t)
	r.RecordClaim(corev1.EventTypeWarning, events.ReasonNoTraffic, "ml", "train-efas", "uid-1", "efa-0000-4f-00-0", strings.Repeat("x", 2000))
	e := written(t, c, "ml", 1)[0]
	assert.Equal(t, "ResourceClaim", e.InvolvedObject.Kind)
	assert.Equal(t, "resource.k8s.io/v1", e.InvolvedObject.APIVersion)
	assert.Equal(t, "train-efas", e.InvolvedObject.Name)
	assert.Equal(t, "uid-1", string(e.InvolvedObject.UID))
	assert.Equal(t, events.ReasonNoTraffic, e.Reason)
	assert.Len(t, e.Message, 1024)
	assert.True(t, strings.HasSuffix(e.Message, "..."))
	assert.Equal(t, "efa-0000-4f-00-0", e.Annotations[events.AnnotationDevice])
}

// TestNilRecorder: without a client there is no Recorder, and recording
// through it does nothing.
func TestNilRecorder(t *testing.T) {
	t.Parallel()
	r := events.New(context.Background(), nil, "node-1", nil)
	assert.Nil(t, r)
	r.Record(corev1.EventTypeNormal, events.ReasonHealthy, "", "ok")
	r.RecordClaim(corev1.EventTypeNormal, events.ReasonTraffic, "ml", "c", "u", "d", "ok")
	r.Stop()
}
