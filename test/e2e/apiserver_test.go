package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/efakit/efakit/driver"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// TestSlicesPassAPIValidation publishes the slices of every fixture in every
// group mode to a real kube-apiserver: its validation, not ours, decides.
func TestSlicesPassAPIValidation(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	paths, err := filepath.Glob("../../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		root, err := sysfs.Open(p)
		require.NoError(t, err)
		topo, err := topology.Scan(root)
		require.NoError(t, err)
		for _, mode := range []driver.GroupMode{driver.GroupsNone, driver.GroupsExclusive, driver.GroupsMixed} {
			name := strings.TrimSuffix(filepath.Base(p), ".sysfs") + "/" + string(mode)
			node := "n-" + strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".sysfs"), ".", "-")
			cfg := driver.Config{NodeName: node, Groups: mode}
			res, err := driver.Resources(topo, nil, cfg)
			require.NoError(t, err, name)
			for _, s := range driver.Slices(res, cfg) {
				got, err := c.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
				require.NoError(t, err, "%s: the API server refused the slice", name)
				// Nothing the driver set was dropped (mixed mode needs
				// DRAPartitionableDevices, on by default in 1.37).
				assert.Equal(t, len(s.Spec.Devices), len(got.Spec.Devices), name)
				assert.Equal(t, len(s.Spec.SharedCounters), len(got.Spec.SharedCounters), name)
				for i := range s.Spec.Devices {
					assert.Equal(t, len(s.Spec.Devices[i].Attributes), len(got.Spec.Devices[i].Attributes), "%s: %s", name, s.Spec.Devices[i].Name)
					assert.Equal(t, len(s.Spec.Devices[i].ConsumesCounters), len(got.Spec.Devices[i].ConsumesCounters), name)
				}
				require.NoError(t, c.client.ResourceV1().ResourceSlices().Delete(ctx, got.Name, metav1.DeleteOptions{}))
			}
		}
	}
}

// apply creates rendered chart objects through the dynamic client.
func apply(t *testing.T, cfg *rest.Config, objs []runtime.Object) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	groups, err := restmapper.GetAPIGroupResources(cs.Discovery())
	require.NoError(t, err)
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		require.NoError(t, err)
		u := &unstructured.Unstructured{Object: m}
		gvk := o.GetObjectKind().GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, gvk.String())
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Create(context.Background(), u, metav1.CreateOptions{})
		require.NoError(t, err, "%s %s: the API server refused it", gvk.Kind, u.GetName())
	}
}

// TestChartAppliesAndPolicyHolds applies every object the chart renders to
// the real API server, then acts as the plugin of node-a with its pod-bound
// service account token: its own node's slice is allowed, another node's
// is refused by the admission policy.
func TestChartAppliesAndPolicyHolds(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "efakit"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	apply(t, c.config, render(t))

	for _, n := range []string{"node-a", "node-b"} {
		_, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod, err := c.client.CoreV1().Pods("efakit").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-a"},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "efakit-plugin",
			Containers: []corev1.Container{{Name: "plugin", Image: "efakit-plugin"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	exp := int64(600)
	tr, err := c.client.CoreV1().ServiceAccounts("efakit").CreateToken(ctx, "efakit-plugin", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	asPlugin := rest.CopyConfig(c.config)
	asPlugin.BearerToken = tr.Status.Token
	pc, err := kubernetes.NewForConfig(asPlugin)
	require.NoError(t, err)

	slice := func(node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + node + "-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: "dra.net", NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: []resourceapi.Device{}}}
	}
	// The API server picks a new policy up asynchronously: wait until
	// it refuses another node's slice, then check the plugin's own node
	// still passes.
	var refused error
	require.Eventually(t, func() bool {
		s, err := pc.ResourceV1().ResourceSlices().Create(ctx, slice("node-b"), metav1.CreateOptions{})
		if err == nil {
			_ = c.client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
			return false
		}
		refused = err
		return true
	}, 30*time.Second, 200*time.Millisecond, "the admission policy must refuse another node's slice")
	assert.Contains(t, refused.Error(), "may not modify resourceslices on node 'node-b'")
	own, err := pc.ResourceV1().ResourceSlices().Create(ctx, slice("node-a"), metav1.CreateOptions{})
	require.NoError(t, err, "the plugin may write its own node's slices")
	require.NoError(t, pc.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{}))
}
