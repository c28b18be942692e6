package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// TestExplainMismatchedClaim: a claim for one EFA on a node in exclusive
// mode, through the real API server and kube-scheduler. The scheduler
// leaves the pod pending with its generic reason; efakit explain, the
// CLI as users run it, names the node, its mode, the request it cannot
// serve and the class that would, and exits 1. The same claim on a node
// in the default mode binds, and explain says so.
func TestExplainMismatchedClaim(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	excl := harness.NewE2ENode(t, c, "explain-exclusive", "../../testdata/sysfs/p5en.48xlarge.sysfs", resources.GroupsExclusive)
	dflt := harness.NewE2ENode(t, c, "explain-default", "../../testdata/sysfs/p5en.48xlarge.sysfs", resources.GroupsNone)
	excl.Slices(4) // four roots, a group each
	dflt.Slices(16)

	bin, err := harness.CLIBinary()
	require.NoError(t, err)
	kubeconfig := filepath.Join(c.Dir, "admin.kubeconfig")
	explain := func(pod string) (int, string) {
		cmd := exec.Command(bin, "explain", "--pod", "default/"+pod, "--kubeconfig", kubeconfig)
		cmd.Env = append(os.Environ(), "KUBECONFIG=")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out) + string(ee.Stderr)
		}
		require.NoError(t, err)
		return 0, string(out)
	}

	oneEFA := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "efa",
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: resources.DefaultDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}
	for _, name := range []string{"explain-on-exclusive", "explain-on-default"} {
		_, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: oneEFA}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	claim := func(name string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: "efa", ResourceClaimName: &name}
	}
	excl.Pod("explain-on-exclusive", claim("explain-on-exclusive"))
	dflt.Pod("explain-on-default", claim("explain-on-default"))

	// The scheduler's own word: the pod pending, the reason generic.
	var reason string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "explain-on-exclusive", metav1.GetOptions{})
		require.NoError(ct, err)
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				reason = cond.Message
			}
		}
		assert.Contains(ct, reason, "cannot allocate all claims")
	}, time.Minute, 200*time.Millisecond, "the scheduler leaves the pod pending")
	assert.NotContains(t, reason, "exclusive", "the scheduler's reason names no mode")
	assert.NotContains(t, reason, resources.DefaultDeviceClass, "nor the class")

	code, text := explain("explain-on-exclusive")
	assert.Equal(t, 1, code, text)
	assert.Contains(t, text, "pod default/explain-on-exclusive is pending.\nthe scheduler says: "+reason+"\n")
	assert.Contains(t, text, "claim \"efa\" (ResourceClaim default/explain-on-exclusive):\n  request \"efa\": 1 single EFA (class efa.networking.k8s.aws)\n")
	assert.Contains(t, text, "  1 node in exclusive mode (EFA groups only): explain-exclusive\n    cannot serve request \"efa\": the node publishes no single EFA\n")
	assert.Contains(t, text, "fix: these nodes publish EFA groups only (--groups=exclusive): ask for groups (class efa-group.networking.k8s.aws")

	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "explain-on-default", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "explain-default"
	}, time.Minute, 200*time.Millisecond, "the same claim binds on the default-mode node")
	code, text = explain("explain-on-default")
	assert.Equal(t, 0, code, text)
	assert.Equal(t, "pod default/explain-on-default is bound to node explain-default.\n", text)

	// A claim that asks a group, else one EFA (firstAvailable), binds in
	// either mode: the group on the exclusive node, the EFA on the other.
	either := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "efa",
		FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "group", DeviceClassName: resources.DefaultGroupDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			{Name: "one", DeviceClassName: resources.DefaultDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}}}
	for _, n := range []*harness.E2ENode{excl, dflt} {
		claim, _ := n.Schedule("explain-either-"+n.Name, either, 1)
		require.Len(t, claim.Status.Allocation.Devices.Results, 1)
		want := map[*harness.E2ENode]string{excl: "efa/group", dflt: "efa/one"}[n]
		assert.Equal(t, want, claim.Status.Allocation.Devices.Results[0].Request, "%s: the subrequest its mode serves", n.Name)
	}
}
