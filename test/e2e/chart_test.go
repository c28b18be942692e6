package e2e

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/efakit/efakit/driver"
)

// render runs `helm template` (the helm tool of this module's go.mod) on
// the chart with extra arguments.
func render(t *testing.T, args ...string) []runtime.Object {
	t.Helper()
	return renderRelease(t, "efakit", "efakit", args...)
}

// renderRelease renders the chart as release name in namespace ns.
func renderRelease(t *testing.T, name, ns string, args ...string) []runtime.Object {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm", "template", name, "../../deployments/helm/efakit", "--namespace", ns, "--kube-version", "1.34.0"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	// Strict decoding into the API's own types: an unknown or misspelled
	// field fails here, not on a cluster.
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out.Bytes())))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 || strings.TrimSpace(string(doc)) == "---" {
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
		require.NoError(t, err, string(doc))
		objs = append(objs, obj)
	}
	return objs
}

func TestChartRenders(t *testing.T) {
	objs := render(t)
	kinds := map[string]int{}
	var ds *appsv1.DaemonSet
	var classes []*resourceapi.DeviceClass
	var role *rbacv1.ClusterRole
	var policy *admissionv1.ValidatingAdmissionPolicy
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		switch v := o.(type) {
		case *appsv1.DaemonSet:
			ds = v
		case *resourceapi.DeviceClass:
			classes = append(classes, v)
		case *rbacv1.ClusterRole:
			role = v
		case *admissionv1.ValidatingAdmissionPolicy:
			policy = v
		}
	}
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1,
		"DeviceClass": 2, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1}, kinds)

	// The chart ships exactly the classes the driver package defines.
	want := driver.DeviceClasses("", "")
	require.Len(t, classes, len(want))
	for i := range want {
		assert.Equal(t, want[i].Name, classes[i].Name)
		assert.Equal(t, want[i].Spec.Selectors[0].CEL.Expression, classes[i].Spec.Selectors[0].CEL.Expression)
	}

	require.NotNil(t, ds)
	c := ds.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.False(t, *sc.Privileged)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	assert.True(t, mounts["/sys"].ReadOnly, "/sys is read-only")
	for _, p := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"} {
		assert.Contains(t, mounts, p)
	}
	env := map[string]*corev1.EnvVarSource{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom
	}
	assert.Equal(t, "spec.nodeName", env["NODE_NAME"].FieldRef.FieldPath)
	assert.Equal(t, "metadata.uid", env["POD_UID"].FieldRef.FieldPath, "POD_UID for rolling updates")
	assert.Equal(t, int32(0), ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntVal)
	assert.Contains(t, c.Args, "--groups=none")
	// The default affinity keeps the plugin off device-plugin nodes and
	// off EKS Auto Mode nodes (AWS's own dra.net driver runs there).
	terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Len(t, terms, 1)
	var keys []string
	for _, e := range terms[0].MatchExpressions {
		keys = append(keys, e.Key+" "+string(e.Operator))
	}
	assert.Contains(t, keys, "efakit.io/efa-device-plugin DoesNotExist")
	assert.Contains(t, keys, "eks.amazonaws.com/compute-type NotIn")

	// Least privilege: no secrets, no wildcard; pods only read (the
	// libfabric environment's container check).
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			assert.Contains(t, []string{"resourceclaims", "resourceslices", "nodes", "pods"}, res)
			if res == "pods" {
				assert.Equal(t, []string{"get"}, r.Verbs)
			}
		}
		assert.NotContains(t, r.Verbs, "*")
	}
	require.NotNil(t, policy)
	assert.Contains(t, policy.Spec.MatchConditions[0].Expression, "system:serviceaccount:efakit:efakit-plugin")
}

// TestChartTestClusterValues: the values for a cluster without EFA or
// without a pod network that reaches the API server (the real node's).
func TestChartTestClusterValues(t *testing.T) {
	for _, o := range render(t, "--set", "sysfsHostPath=/srv/p5", "--set", "hostNetwork=true",
		"--set", "extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set", "extraEnv[0].value=10.0.0.1") {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := ds.Spec.Template.Spec
		assert.True(t, spec.HostNetwork)
		assert.Equal(t, corev1.DNSClusterFirstWithHostNet, spec.DNSPolicy)
		assert.Contains(t, spec.Containers[0].Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "10.0.0.1"})
		for _, v := range spec.Volumes {
			if v.Name == "sys" {
				assert.Equal(t, "/srv/p5", v.HostPath.Path)
			}
		}
		assert.Contains(t, spec.Containers[0].Args, "--sysfs=/sys", "mounted at /sys whatever the host path")
	}
	for _, o := range render(t) {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			assert.False(t, ds.Spec.Template.Spec.HostNetwork, "not by default")
		}
	}
}

func TestChartValues(t *testing.T) {
	objs := render(t, "--set", "groups=mixed", "--set", "driverName=efa.example.com", "--set", "admissionPolicy.enabled=false")
	for _, o := range objs {
		switch v := o.(type) {
		case *appsv1.DaemonSet:
			args := strings.Join(v.Spec.Template.Spec.Containers[0].Args, " ")
			assert.Contains(t, args, "--groups=mixed")
			assert.Contains(t, args, "--driver-name=efa.example.com")
		case *resourceapi.DeviceClass:
			assert.Contains(t, v.Spec.Selectors[0].CEL.Expression, `device.driver == "efa.example.com"`)
		case *admissionv1.ValidatingAdmissionPolicy:
			t.Error("admission policy rendered though disabled")
		}
	}
}
