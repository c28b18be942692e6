package harness

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply creates rendered chart objects through the dynamic client.
func Apply(t *testing.T, cfg *rest.Config, objs []runtime.Object) {
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

// PluginIdentity is the chart's plugin as the API server knows it on
// node: the DaemonSet's pod there (made by hand: no controller, no
// kubelet runs it) and a token of the chart's service account bound to
// that pod, which carries the node's name, as the kubelet gets it for the
// pod. The chart (namespace ns) must be applied.
func PluginIdentity(t *testing.T, c *ControlPlane, ns, node string) (*rest.Config, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "efakit-plugin",
			Containers: []corev1.Container{{Name: "plugin", Image: "efakit-plugin"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Longer than the longest make plugin-fleet run: the plugin does not
	// renew a token read from a kubeconfig.
	exp := int64(24 * 3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "efakit-plugin", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, pod
}

// PluginKubeconfig writes a kubeconfig for the chart's plugin on node
// (PluginIdentity) into dir.
func PluginKubeconfig(t *testing.T, c *ControlPlane, ns, node, dir string) string {
	t.Helper()
	cfg, _ := PluginIdentity(t, c, ns, node)
	path := filepath.Join(dir, "plugin.kubeconfig")
	require.NoError(t, writeKubeconfig(path, cfg.Host, cfg.BearerToken))
	return path
}
