package e2e

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/efakit/efakit/test/e2e/harness"
)

// TestRealNodeSliceRepair: a real kubelet deletes every ResourceSlice of
// its node when it starts; after a restart of the kubelet alone, the
// plugin's slices are published again within seconds (it took 30.5 s, the
// resourceslice controller's default sync delay, before), and the plugin
// logs the repair. The time from the kubelet's delete to the new slice is
// measured from a watch on the node's slices.
func TestRealNodeSliceRepair(t *testing.T) {
	c := harness.APIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := startRealNode(t, c)
	n.StartEFAKit(p5Fixture)
	n.WaitEFAs(t, 32)

	l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name})
	require.NoError(t, err)
	require.NotEmpty(t, l.Items)
	old := map[types.UID]bool{}
	for _, s := range l.Items {
		old[s.UID] = true
	}
	w, err := c.Client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{
		FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name, ResourceVersion: l.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	var mu sync.Mutex
	var deleted, added time.Time
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok {
				continue
			}
			mu.Lock()
			switch {
			case ev.Type == watch.Deleted && old[s.UID] && deleted.IsZero():
				deleted = time.Now()
			case ev.Type == watch.Added && !old[s.UID] && !deleted.IsZero() && added.IsZero():
				added = time.Now()
			}
			mu.Unlock()
		}
	}()

	n.StopProc("kubelet", syscall.SIGTERM, 30*time.Second)
	started := time.Now()
	n.StartKubelet()
	// The kubelet deletes the node's slices once its node lister has the
	// Node, retrying from 1 s and doubling (with up to 20% jitter): a
	// kubelet whose lister takes T to fill deletes by about 2.4T. It takes
	// under a second here, but once, beside make test's other work, the
	// kubelet registered its node 56 s after it started and a 60 s wait
	// ran out; 150 s covers a T of a minute.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return !deleted.IsZero() }, 150*time.Second, 50*time.Millisecond,
		"the restarted kubelet deletes the node's slices; kubelet log:\n%s", n.LogTail("kubelet", 3000))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return !added.IsZero() }, 10*time.Second, 50*time.Millisecond,
		"the plugin's slices back within 10 s of the kubelet's delete; plugin log:\n%s", n.LogTail("efakit-plugin", 3000))
	mu.Lock()
	took := added.Sub(deleted)
	mu.Unlock()
	t.Logf("kubelet restart: the node's slices deleted %v after the start, the plugin's back %v later",
		deleted.Sub(started).Round(time.Millisecond), took.Round(time.Millisecond))
	n.WaitEFAs(t, 32)
	require.Eventually(t, func() bool {
		return strings.Contains(n.LogTail("efakit-plugin", 20000), "Published again the ResourceSlices someone else deleted or changed")
	}, 10*time.Second, 100*time.Millisecond, "the plugin logs the repair")
	log := n.LogTail("efakit-plugin", 100000)
	assert.Equal(t, 1, strings.Count(log, "Published again the ResourceSlices someone else deleted or changed"), "one line per repair")
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "Published again the ResourceSlices someone else deleted or changed") {
			t.Logf("plugin: %s", line)
		}
	}
}
