package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/test/e2e/harness"
)

// portDownFixture is the p5 capture with the port of the EFA at
// 0000:50:00.0 DOWN.
func portDownFixture(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../../testdata/sysfs/p5.48xlarge.sysfs")
	require.NoError(t, err)
	defer f.Close()
	entries, err := sysfs.ParseCapture(f)
	require.NoError(t, err)
	const state = "0000:50:00.0/infiniband/rdmap80s0/ports/1/state"
	found := false
	for i, e := range entries {
		if strings.HasSuffix(e.Path, state) {
			require.Equal(t, "4: ACTIVE\n", string(e.Data))
			entries[i].Data = []byte("1: DOWN\n")
			found = true
		}
	}
	require.True(t, found, state)
	// Written anew, so that its end marker sums what it holds.
	var b bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&b, []string{"p5.48xlarge, rdmap80s0's port DOWN"}, entries))
	fixture := filepath.Join(t.TempDir(), "p5-port-down.sysfs")
	require.NoError(t, os.WriteFile(fixture, b.Bytes(), 0o644))
	return fixture
}

// TestUnhealthyWithheldWithoutTaints: an API server that drops device
// taints (DRADeviceTaints off, as 1.34 and 1.35 have it by default) makes
// the plugin leave the unhealthy EFA out of its slice instead, and say so.
func TestUnhealthyWithheldWithoutTaints(t *testing.T) {
	c, err := harness.StartControlPlane("--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false")
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	n := harness.NewE2ENode(t, c, "p5-no-taints", portDownFixture(t), resources.GroupsNone)
	var names []string
	for _, s := range n.Slices(31) {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
			assert.Empty(t, d.Taints)
		}
	}
	assert.NotContains(t, names, "efa-0000-50-00-0", "withheld")
	require.Eventually(t, func() bool {
		log, _ := os.ReadFile(filepath.Join(n.Dir, "plugin.log"))
		return strings.Contains(string(log), "unhealthy EFAs are withheld from the ResourceSlices instead of tainted")
	}, 10*time.Second, 100*time.Millisecond)
}

// TestSchedulerSkipsUnhealthyEFA: on a p5 whose EFA at 0000:50:00.0 has
// its port DOWN, the plugin publishes that EFA with a NoSchedule taint,
// the real API server keeps it (DRADeviceTaints is on in 1.37), and the
// real scheduler gives it to no claim, while its healthy neighbour is
// allocated.
func TestSchedulerSkipsUnhealthyEFA(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	fixture := portDownFixture(t)

	n := harness.NewE2ENode(t, c, "p5-unhealthy", fixture, resources.GroupsNone)
	var taints []resourceapi.DeviceTaint
	for _, s := range n.Slices(32) {
		for _, d := range s.Spec.Devices {
			if d.Name == "efa-0000-50-00-0" {
				taints = d.Taints
			} else {
				assert.Empty(t, d.Taints, d.Name)
			}
		}
	}
	require.Len(t, taints, 1, "the API server kept the taint")
	assert.Equal(t, "dra.net/unhealthy", taints[0].Key)
	assert.Equal(t, "port-not-active", taints[0].Value)
	assert.Equal(t, resourceapi.DeviceTaintEffectNoSchedule, taints[0].Effect)
	assert.NotNil(t, taints[0].TimeAdded, "set by the API server")

	// The plugin says so on the Node, as kubectl describe node lists it:
	// core/v1 Events in default about the Node.
	var nodeEvents []corev1.Event
	require.Eventually(t, func() bool {
		l, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n.Name + ",reason=" + events.ReasonUnhealthy})
		if err != nil {
			return false
		}
		nodeEvents = l.Items
		return len(nodeEvents) > 0
	}, 30*time.Second, 200*time.Millisecond, "an EFAUnhealthy Event on node %s", n.Name)
	require.Len(t, nodeEvents, 1, "one Event for the one unhealthy EFA")
	assert.Equal(t, corev1.EventTypeWarning, nodeEvents[0].Type)
	assert.Contains(t, nodeEvents[0].Message, "efa-0000-50-00-0 (rdmap80s0)")
	assert.Contains(t, nodeEvents[0].Message, "port DOWN")
	assert.Equal(t, events.EventSourceComponent, nodeEvents[0].Source.Component)

	at := func(addr string) resourceapi.ResourceClaimSpec {
		var s resourceapi.ResourceClaimSpec
		s.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "efa.networking.k8s.aws", Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["dra.net"].pciAddress == "` + addr + `"`}}}}}}
		return s
	}
	healthy, nodes := n.Schedule("healthy-neighbour", at("0000:51:00.0"), 1)
	assert.Equal(t, []string{"efa-0000-51-00-0"}, byReq(healthy)["efa"])
	assert.Len(t, nodes, 1)

	_, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "on-the-down-efa"}, Spec: at("0000:50:00.0")}, metav1.CreateOptions{})
	require.NoError(t, err)
	cn := "on-the-down-efa"
	n.Pod("on-the-down-efa-0", corev1.PodResourceClaim{Name: "c", ResourceClaimName: &cn})
	// The scheduler tries and gives up: the pod stays unschedulable.
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "on-the-down-efa-0", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return true
			}
		}
		return false
	}, 60*time.Second, 200*time.Millisecond, "the scheduler's verdict")
	time.Sleep(2 * time.Second)
	cl, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, "on-the-down-efa", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, cl.Status.Allocation, "the tainted EFA is given to no claim")
}
