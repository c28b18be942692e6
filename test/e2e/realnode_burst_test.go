package e2e

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// TestRealNodeBursts: pods start on a p5 node filling at once (32
// single-EFA pods; 8 pods each with a GPU and its 4 EFAs) and one after
// another, and on a trn2 node (16 single-EFA pods), every pod of a burst
// created within a moment, as a Job or a LeaderWorkerSet does. Every pod
// runs within 3 minutes, the plugin has prepared each one's claim, and
// once they are deleted their claims are unprepared and deleted and
// containerd runs none of their containers (harness.RealNode.Burst).
// bench/cluster's TestRealNodePodStart (make burst) runs the same bursts
// in rounds, each beside the same pods without claims, and prints where
// the time went.
func TestRealNodeBursts(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	single := func(int) []corev1.PodResourceClaim {
		return []corev1.PodResourceClaim{harness.TemplateClaim("efa", "single-efa-claim")}
	}
	t.Run("p5.48xlarge", func(t *testing.T) {
		n := startRealNode(t, c)
		n.EnsureNamespace()
		require.Len(t, n.StartAccelDriver(p5Fixture), 8)
		harness.CreateSeed(t, c, "seed-claims.yaml")
		harness.CreateTemplates(t, c, p5Fixture, resources.GroupsNone, "efakit-")
		n.StartEFAKit(p5Fixture)
		defer n.KillEFAKit(syscall.SIGTERM)
		n.WaitEFAs(t, 32)
		t.Run("burst-32-single-efa", func(t *testing.T) { n.bursts(t, "single", 32, 1, single) })
		t.Run("burst-8-gpu-with-efas", func(t *testing.T) {
			n.bursts(t, "gpu", 8, 1, func(int) []corev1.PodResourceClaim {
				return []corev1.PodResourceClaim{harness.TemplateClaim("c", "efakit-gpu-with-efas")}
			})
		})
		t.Run("one-by-one", func(t *testing.T) { n.bursts(t, "one", 1, 2, single) })
	})
	t.Run("trn2.48xlarge", func(t *testing.T) {
		n := startRealNode(t, c)
		n.EnsureNamespace()
		require.NotEmpty(t, n.StartAccelDriver(trn2Fixture))
		harness.CreateSeed(t, c, "seed-claims.yaml")
		n.StartEFAKit(trn2Fixture)
		defer n.KillEFAKit(syscall.SIGTERM)
		n.WaitEFAs(t, 16)
		t.Run("burst-16-single-efa", func(t *testing.T) { n.bursts(t, "trn2", 16, 1, single) })
	})
}

// bursts runs count bursts, one after another, of size sleeping pods with
// the claims claimsOf gives pod i, and checks the plugin prepared every
// pod's claim (harness.RealNode.Burst checks the rest).
func (n *realNode) bursts(t *testing.T, name string, size, count int, claimsOf func(i int) []corev1.PodResourceClaim) {
	t.Helper()
	client := n.CP.FastClient(t)
	for r := range count {
		burst := fmt.Sprintf("%s-claims-%d", name, r)
		var pods []*corev1.Pod
		for i := range size {
			pods = append(pods, n.SleeperPod(fmt.Sprintf("%s-%d", burst, i), burst, claimsOf(i)...))
		}
		times := n.Burst(t, client, pods)
		require.Len(t, times, size)
		for pod, pt := range times {
			assert.False(t, pt.Prepared.IsZero(), "the plugin's log says it prepared %s's claim", pod)
		}
	}
}
