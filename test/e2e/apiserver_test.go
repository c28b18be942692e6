package e2e

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/efakit/efakit/test/e2e/harness"
)

// TestChartAppliesAndPolicyHolds applies every object the chart renders to
// the real API server, then acts as the plugin of node-a with its pod-bound
// service account token against the chart's admission policy: it may
// create, update, delete and delete by collection the slices of its own
// node and driver (dra.net), and nothing of node-b's dra.net slice or of
// node-a's slice of another driver (a GPU driver beside efakit): neither
// create, update, take over (a changed node name or driver), delete, nor
// delete as an item of a deletecollection.
func TestChartAppliesAndPolicyHolds(t *testing.T) {
	c := harness.APIServer(t)
	ctx := context.Background()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "efakit"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	harness.Apply(t, c.Config, harness.Render(t))

	for _, n := range []string{"node-a", "node-b"} {
		_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	asPlugin, pod := harness.PluginIdentity(t, c, "efakit", "node-a")
	pc, err := kubernetes.NewForConfig(asPlugin)
	require.NoError(t, err)
	// The plugin's owner checks watch its Node (list and watch by name).
	nl, err := pc.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
	if assert.NoError(t, err, "the plugin's token lists its Node") {
		assert.Len(t, nl.Items, 1)
	}
	plugin, admin := pc.ResourceV1().ResourceSlices(), c.Client.ResourceV1().ResourceSlices()

	// Least privilege: the plugin's token reads no Pod, not another
	// node's, not its own node's, not even its own pod (the kubelet's
	// PodResources API tells it which containers use which claims).
	other, err := c.Client.CoreV1().Pods("efakit").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workload-b"},
		Spec: corev1.PodSpec{NodeName: "node-b", ServiceAccountName: "efakit-plugin", Containers: []corev1.Container{{Name: "train", Image: "train",
			Env: []corev1.EnvVar{{Name: "WANDB_API_KEY", Value: "inline-secret"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, name := range []string{other.Name, pod.Name} {
		_, err := pc.CoreV1().Pods("efakit").Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsForbidden(err), "the plugin's token reads pod %s: %v", name, err)
	}
	_, err = pc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	assert.True(t, apierrors.IsForbidden(err), "the plugin's token lists pods: %v", err)

	// slice is a slice of driver on node, or of every node where node is "".
	slice := func(driver, node string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + node + "-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver,
				Pool: resourceapi.ResourcePool{Name: "e2e-" + driver + "-" + cmp.Or(node, "all"), ResourceSliceCount: 1}, Devices: []resourceapi.Device{}}}
		if node == "" {
			all := true
			s.Spec.AllNodes = &all
		} else {
			s.Spec.NodeName = &node
		}
		return s
	}
	// The API server picks a new policy up asynchronously: wait until
	// it refuses another node's slice.
	var refused error
	require.Eventually(t, func() bool {
		s, err := plugin.Create(ctx, slice("dra.net", "node-b"), metav1.CreateOptions{})
		if err == nil {
			_ = admin.Delete(ctx, s.Name, metav1.DeleteOptions{})
			return false
		}
		refused = err
		return true
	}, 30*time.Second, 200*time.Millisecond, "the admission policy must refuse another node's slice")
	assert.Contains(t, refused.Error(), "may not modify resourceslices on node 'node-b'")

	const (
		nodeB     = "may not modify resourceslices on node 'node-b'"
		gpuDriver = "may modify resourceslices of driver 'dra.net' only, not of driver 'gpu.example.com'"
	)
	create := func(t *testing.T, s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
		t.Helper()
		got, err := admin.Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = admin.Delete(ctx, got.Name, metav1.DeleteOptions{}) })
		return got
	}
	// denied: the request was refused by the policy, with its message.
	denied := func(t *testing.T, err error, msg string) {
		t.Helper()
		require.Error(t, err, "the policy must refuse it")
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.Contains(t, err.Error(), msg)
	}
	// unchanged: the slice is stored as it was.
	unchanged := func(t *testing.T, s *resourceapi.ResourceSlice) {
		t.Helper()
		got, err := admin.Get(ctx, s.Name, metav1.GetOptions{})
		require.NoError(t, err, "%s still exists", s.Name)
		assert.Equal(t, s.ResourceVersion, got.ResourceVersion, "%s unchanged", s.Name)
	}

	t.Run("create", func(t *testing.T) {
		own, err := plugin.Create(ctx, slice("dra.net", "node-a"), metav1.CreateOptions{})
		require.NoError(t, err, "the plugin may write its own node's slices")
		require.NoError(t, admin.Delete(ctx, own.Name, metav1.DeleteOptions{}))
		for _, tc := range []struct {
			name, driver, node, msg string
		}{
			{"another node's", "dra.net", "node-b", nodeB},
			{"another driver's on its node", "gpu.example.com", "node-a", gpuDriver},
			{"every node's", "dra.net", "", "may not modify cluster resourceslices"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, err := plugin.Create(ctx, slice(tc.driver, tc.node), metav1.CreateOptions{})
				if err == nil {
					_ = admin.Delete(ctx, s.Name, metav1.DeleteOptions{})
				}
				denied(t, err, tc.msg)
			})
		}
	})

	t.Run("update", func(t *testing.T) {
		own := create(t, slice("dra.net", "node-a"))
		own.Spec.Pool.Generation++
		_, err := plugin.Update(ctx, own, metav1.UpdateOptions{})
		require.NoError(t, err, "the plugin may update its own node's slices")
		for _, tc := range []struct {
			name   string
			of     *resourceapi.ResourceSlice
			change func(*resourceapi.ResourceSlice)
			msg    string // the policy's refusal; "" where the API's validation refuses first
		}{
			{"another node's", slice("dra.net", "node-b"), func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Generation++ }, nodeB},
			{"another driver's on its node", slice("gpu.example.com", "node-a"), func(s *resourceapi.ResourceSlice) { s.Spec.Pool.Generation++ }, gpuDriver},
			// Node name and driver are immutable: the API's validation,
			// which runs before validating admission, refuses these
			// first; the policy would refuse them too.
			{"its own moved to another node", slice("dra.net", "node-a"), func(s *resourceapi.ResourceSlice) { b := "node-b"; s.Spec.NodeName = &b }, ""},
			{"its own given to another driver", slice("dra.net", "node-a"), func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "gpu.example.com" }, ""},
			{"another driver's taken over", slice("gpu.example.com", "node-a"), func(s *resourceapi.ResourceSlice) { s.Spec.Driver = "dra.net" }, ""},
			{"another node's moved to its node", slice("dra.net", "node-b"), func(s *resourceapi.ResourceSlice) { a := "node-a"; s.Spec.NodeName = &a }, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := create(t, tc.of)
				// The plugin reads it (get is granted), changes it and
				// writes it back.
				mine, err := plugin.Get(ctx, s.Name, metav1.GetOptions{})
				require.NoError(t, err)
				tc.change(mine)
				_, err = plugin.Update(ctx, mine, metav1.UpdateOptions{})
				if tc.msg != "" {
					denied(t, err, tc.msg)
				} else {
					require.Error(t, err)
					assert.True(t, apierrors.IsInvalid(err), "%v", err)
					assert.Contains(t, err.Error(), "field is immutable")
				}
				unchanged(t, s)
			})
		}
	})

	t.Run("delete", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			of   *resourceapi.ResourceSlice
			msg  string
		}{
			{"another node's", slice("dra.net", "node-b"), nodeB},
			{"another driver's on its node", slice("gpu.example.com", "node-a"), gpuDriver},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := create(t, tc.of)
				denied(t, plugin.Delete(ctx, s.Name, metav1.DeleteOptions{}), tc.msg)
				unchanged(t, s)
			})
		}
		own := create(t, slice("dra.net", "node-a"))
		require.NoError(t, plugin.Delete(ctx, own.Name, metav1.DeleteOptions{}), "the plugin may delete its own node's slices")
	})

	// Each item of a deletecollection is admitted as a DELETE of its own:
	// the call fails on the first refused item, and the refused items stay.
	t.Run("deletecollection", func(t *testing.T) {
		otherNode := create(t, slice("dra.net", "node-b"))
		otherDriver := create(t, slice("gpu.example.com", "node-a"))
		for _, tc := range []struct {
			name, selector, msg string
			stays               *resourceapi.ResourceSlice
		}{
			{"every driver's on its node", "spec.nodeName=node-a", gpuDriver, otherDriver},
			{"its driver's on every node", "spec.driver=dra.net", nodeB, otherNode},
		} {
			t.Run(tc.name, func(t *testing.T) {
				create(t, slice("dra.net", "node-a"))
				err := plugin.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: tc.selector})
				denied(t, err, tc.msg)
				unchanged(t, tc.stays)
			})
		}
		create(t, slice("dra.net", "node-a"))
		require.NoError(t, plugin.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=dra.net"}),
			"the plugin may delete its own node's slices of its driver together")
		left, err := admin.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=dra.net"})
		require.NoError(t, err)
		assert.Empty(t, left.Items)
		unchanged(t, otherNode)
		unchanged(t, otherDriver)
	})
	// The plugin writes its entries of claims' status.devices: of its
	// driver, in a claim allocated on its node; not another driver's
	// entry, not a claim of another node, and never the allocation.
	t.Run("claim status", func(t *testing.T) { checkClaimStatusRBAC(t, c, pc) })
}

// checkClaimStatusRBAC: the chart's role and the API server's checks of
// the resourceclaims/driver subresource (Kubernetes 1.36 and later) let
// the plugin's token on node-a apply its driver's entries of claims
// allocated on node-a, and nothing else of a claim's status.
func checkClaimStatusRBAC(t *testing.T, c *harness.ControlPlane, pc kubernetes.Interface) {
	ctx := context.Background()
	claimOn := func(name, node string) *resourceapi.ResourceClaim {
		cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "efakit", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws"}},
				{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}}
		cl, err := c.Client.ResourceV1().ResourceClaims("efakit").Create(ctx, cl, metav1.CreateOptions{})
		require.NoError(t, err)
		cl.Finalizers = []string{resourceapi.Finalizer}
		cl, err = c.Client.ResourceV1().ResourceClaims("efakit").Update(ctx, cl, metav1.UpdateOptions{})
		require.NoError(t, err)
		cl.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "efa", Driver: "dra.net", Pool: node, Device: "efa-0000-4f-00-0"},
				{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: "gpu-0"}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
		}
		cl, err = c.Client.ResourceV1().ResourceClaims("efakit").UpdateStatus(ctx, cl, metav1.UpdateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			cl, err := c.Client.ResourceV1().ResourceClaims("efakit").Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				cl.Status = resourceapi.ResourceClaimStatus{}
				cl, _ = c.Client.ResourceV1().ResourceClaims("efakit").UpdateStatus(ctx, cl, metav1.UpdateOptions{})
				cl.Finalizers = nil
				_, _ = c.Client.ResourceV1().ResourceClaims("efakit").Update(ctx, cl, metav1.UpdateOptions{})
				_ = c.Client.ResourceV1().ResourceClaims("efakit").Delete(ctx, name, metav1.DeleteOptions{})
			}
		})
		return cl
	}
	entry := func(driver, node, device string) *resourceapply.AllocatedDeviceStatusApplyConfiguration {
		return resourceapply.AllocatedDeviceStatus().WithDriver(driver).WithPool(node).WithDevice(device).
			WithConditions(metaapply.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).WithReason("Prepared").
				WithLastTransitionTime(metav1.Now()))
	}
	apply := func(cl *resourceapi.ResourceClaim, status *resourceapply.ResourceClaimStatusApplyConfiguration) error {
		_, err := pc.ResourceV1().ResourceClaims("efakit").ApplyStatus(ctx,
			resourceapply.ResourceClaim(cl.Name, "efakit").WithUID(cl.UID).WithStatus(status),
			metav1.ApplyOptions{FieldManager: "efakit-plugin", Force: true})
		return err
	}
	own, other := claimOn("on-node-a", "node-a"), claimOn("on-node-b", "node-b")
	require.NoError(t, apply(own, resourceapply.ResourceClaimStatus().WithDevices(entry("dra.net", "node-a", "efa-0000-4f-00-0"))),
		"the plugin writes its driver's entry of a claim allocated on its node")
	got, err := c.Client.ResourceV1().ResourceClaims("efakit").Get(ctx, own.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, got.Status.Devices, 1)
	assert.Equal(t, "efa-0000-4f-00-0", got.Status.Devices[0].Device)

	for _, tc := range []struct {
		name   string
		of     *resourceapi.ResourceClaim
		status *resourceapply.ResourceClaimStatusApplyConfiguration
		msg    string
	}{
		{"another driver's entry", own, resourceapply.ResourceClaimStatus().WithDevices(entry("dra.net", "node-a", "efa-0000-4f-00-0"), entry("gpu.example.com", "node-a", "gpu-0")),
			`resource="resourceclaims/driver"`},
		{"a claim of another node", other, resourceapply.ResourceClaimStatus().WithDevices(entry("dra.net", "node-b", "efa-0000-4f-00-0")),
			`resource="resourceclaims/driver"`},
		{"the allocation", own, resourceapply.ResourceClaimStatus().WithDevices(entry("dra.net", "node-a", "efa-0000-4f-00-0")).
			WithReservedFor(resourceapply.ResourceClaimConsumerReference().WithResource("pods").WithName("p").WithUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")),
			`resource="resourceclaims/binding"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := apply(tc.of, tc.status)
			require.Error(t, err)
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	got, err = c.Client.ResourceV1().ResourceClaims("efakit").Get(ctx, other.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Status.Devices, "another node's claim unchanged")
}
