package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNS is the namespace of the real node's pods.
const NodeNS = "realnode"

// PrintScript is what every test container runs: it prints what it got,
// the uverbs nodes with their device numbers, its environment and the
// device metadata files, and what opening the first node gives (no EFA
// here: ENXIO), then waits.
const PrintScript = `echo '== devices'; ls -ln /dev/infiniband 2>&1
echo '== env'; env | sort
echo '== metadata'; find /var/run/kubernetes.io -type f 2>/dev/null | sort | while read f; do echo "# $f"; cat "$f"; echo; done
echo '== open'; for f in /dev/infiniband/*; do cat "$f" 2>&1 | head -1; break; done
echo '== end'; exec sleep 100000`

// PublishedEFAs are the devices of the node's dra.net slices, by name.
func (n *RealNode) PublishedEFAs(t *testing.T) map[string]resourceapi.Device {
	l, err := n.CP.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name})
	require.NoError(t, err)
	out := map[string]resourceapi.Device{}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

// WaitEFAs waits until the node's dra.net slices hold want devices.
func (n *RealNode) WaitEFAs(t *testing.T, want int) {
	t.Helper()
	got := 0
	Eventually(t, func() bool { got = len(n.PublishedEFAs(t)); return got == want }, 60*time.Second, 100*time.Millisecond,
		func() string {
			return fmt.Sprintf("%d dra.net devices published, not %d; plugin log:\n%s", got, want, n.LogTail("efakit-plugin", 2000))
		})
}

// EnsureNamespace makes the pods' namespace and its default service
// account (no controller manager makes them here).
func (n *RealNode) EnsureNamespace() {
	ctx := context.Background()
	_, err := n.CP.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: NodeNS}}, metav1.CreateOptions{})
	require.NoError(n.T, CreateIgnoreExists(err))
	_, err = n.CP.Client.CoreV1().ServiceAccounts(NodeNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(n.T, CreateIgnoreExists(err))
}

// PrinterPod is a pod on the node whose one container uses every claim of
// the pod and runs PrintScript.
func (n *RealNode) PrinterPod(name string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	no := false
	grace := int64(0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeNS},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": n.Name},
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			ResourceClaims:                claims,
			Containers: []corev1.Container{{Name: "print", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", PrintScript}}},
		}}
	for _, c := range claims {
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: c.Name})
	}
	return pod
}

// TemplateClaim is a pod claim made from the named claim template.
func TemplateClaim(name, template string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &template}
}
