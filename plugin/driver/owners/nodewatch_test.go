package owners_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/efakit/efakit/plugin/driver/owners"
)

// TestNodeWatchSaysWhy: a role without list and watch of nodes (the
// chart's before the Node watch) gets a 403 at every list; the owner check
// must say that, not only that its wait ran out.
func TestNodeWatchSaysWhy(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil)
	})
	w := owners.NewNodeWatch(client, "node-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, nil)
	wait, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	_, err := w.Get(wait)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, apierrors.IsForbidden(err), "the 403 is in the error: %v", err)
	assert.ErrorContains(t, err, "reading node node-1: the watch of the Node has not listed yet")
}

// TestNodeWatchGet: the Node as listed, and a Node that does not exist.
func TestNodeWatchGet(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"a": "b"}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := owners.NewNodeWatch(client, "node-1")
	go w.Run(ctx, nil)
	n, err := w.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", n.Labels["a"])

	missing := owners.NewNodeWatch(client, "node-2")
	// The fake client ignores field selectors: the store holds node-1,
	// and node-2 is looked up by name.
	go missing.Run(ctx, nil)
	_, err = missing.Get(ctx)
	assert.ErrorContains(t, err, "reading node node-2: no such Node")
}
