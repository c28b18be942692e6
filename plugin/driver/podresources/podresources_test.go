package podresources_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/podresources/podresourcestest"
)

func ptr[T any](v T) *T { return &v }

// TestList: the kubelet's answer read over its socket: each container with
// the claims it references, named as the kubelet names them (a template's
// claim by the name in the pod's status, the extended-resource claim for
// the containers its mappings name), sidecars but no other init
// container, pods sorted.
func TestList(t *testing.T) {
	t.Parallel()
	srv := podresourcestest.Start(t)
	always := corev1.ContainerRestartPolicyAlways
	train := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "efas", ResourceClaimTemplateName: ptr("four-efas")},
				{Name: "shared", ResourceClaimName: ptr("shared-efa")},
			},
			InitContainers: []corev1.Container{
				{Name: "setup", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "efas"}}}},
				{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "shared"}}}},
			},
			Containers: []corev1.Container{
				{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "efas", Request: "efas"}, {Name: "shared"}}}},
				{Name: "other"},
			},
		},
		Status: corev1.PodStatus{
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "efas", ResourceClaimName: ptr("train-efas-x7k2p")}},
			ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "train-extended-resources-q9",
				RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "other", ResourceName: "vpc.amazonaws.com/efa", RequestName: "container-1-request-0"}}},
		},
	}
	idle := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "idle"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	srv.SetPods(train, idle)

	c, err := podresources.New(srv.Socket)
	require.NoError(t, err)
	defer c.Close()
	pods, err := c.List(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []podresources.Pod{
		{Namespace: "default", Name: "idle", Containers: []podresources.Container{{Name: "c"}}},
		{Namespace: "ml", Name: "train", Containers: []podresources.Container{
			{Name: "sidecar", Claims: []podresources.Claim{{Namespace: "ml", Name: "shared-efa"}}},
			{Name: "main", Claims: []podresources.Claim{{Namespace: "ml", Name: "train-efas-x7k2p"}, {Namespace: "ml", Name: "shared-efa"}}},
			{Name: "other", Claims: []podresources.Claim{{Namespace: "ml", Name: "train-extended-resources-q9"}}},
		}},
	}, pods)
	assert.Equal(t, []string{"ml/train"}, podresources.Using(pods, "ml", "shared-efa"))
	assert.Empty(t, podresources.Using(pods, "default", "shared-efa"), "a claim is named within its namespace")
}

// TestListFails: a kubelet that does not answer (no socket: an older
// kubelet, the directory not mounted) or answers with an error gives an
// error naming the socket, and the client answers again once the kubelet
// does.
func TestListFails(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "kubelet.sock")
	c, err := podresources.New(missing)
	require.NoError(t, err, "no connection before the first call")
	_, err = c.List(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubelet PodResources API at "+missing+": list: ")
	require.NoError(t, c.Close())

	srv := podresourcestest.Start(t)
	c, err = podresources.New(srv.Socket)
	require.NoError(t, err)
	defer c.Close()
	srv.Fail(errors.New("pod resources unavailable"))
	_, err = c.List(context.Background())
	assert.ErrorContains(t, err, "pod resources unavailable")
	srv.Fail(nil)
	pods, err := c.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pods)
}
