package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/internal/fleet"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

func TestChartRenders(t *testing.T) {
	objs := harness.Render(t)
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

	// The chart ships exactly the classes the driver package defines, the
	// single-EFA class with AWS's device plugin's extended resource.
	want := resources.DeviceClasses(resources.ClassOptions{ExtendedResourceName: resources.DevicePluginResource})
	require.Len(t, classes, len(want))
	for i := range want {
		assert.Equal(t, want[i].Name, classes[i].Name)
		assert.Equal(t, want[i].Spec.Selectors[0].CEL.Expression, classes[i].Spec.Selectors[0].CEL.Expression)
		assert.Equal(t, want[i].Spec.ExtendedResourceName, classes[i].Spec.ExtendedResourceName)
	}
	require.NotNil(t, classes[0].Spec.ExtendedResourceName)
	assert.Equal(t, "vpc.amazonaws.com/efa", *classes[0].Spec.ExtendedResourceName)

	require.NotNil(t, ds)
	c := ds.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.False(t, *sc.Privileged)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	// Every host path the container sees: /sys read-only with what is
	// mounted under it, and of the kubelet's plugins directory only the
	// driver's own, at the path the kubelet knows it by.
	assert.Equal(t, map[string]hostMount{
		"/sys":                              {host: "/sys", hostType: corev1.HostPathDirectory, readOnly: true, recursive: ptr(corev1.RecursiveReadOnlyEnabled)},
		"/var/lib/kubelet/plugins/dra.net":  {host: "/var/lib/kubelet/plugins/dra.net", hostType: corev1.HostPathDirectoryOrCreate},
		"/var/lib/kubelet/plugins_registry": {host: "/var/lib/kubelet/plugins_registry", hostType: corev1.HostPathDirectoryOrCreate},
		"/var/lib/kubelet/pod-resources":    {host: "/var/lib/kubelet/pod-resources", hostType: corev1.HostPathDirectory, readOnly: true},
		"/var/run/cdi":                      {host: "/var/run/cdi", hostType: corev1.HostPathDirectoryOrCreate},
	}, hostMounts(t, ds))
	assert.Contains(t, c.Args, "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock")
	assert.Contains(t, c.Args, "--kube-api-qps=50")
	assert.Contains(t, c.Args, "--kube-api-burst=100")
	assert.Contains(t, c.Args, "--kubelet-plugins-directory-path=/var/lib/kubelet/plugins", "the plugin finds its directory in it by the driver name")
	env := map[string]*corev1.EnvVarSource{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom
	}
	assert.Equal(t, "spec.nodeName", env["NODE_NAME"].FieldRef.FieldPath)
	assert.Equal(t, "metadata.uid", env["POD_UID"].FieldRef.FieldPath, "POD_UID for rolling updates")
	assert.Equal(t, int32(0), ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntVal)
	assert.Contains(t, c.Args, "--groups=none")
	assert.Contains(t, c.Args, "--sharing=none")
	assert.Contains(t, c.Args, "--claim-status=true")
	assert.Contains(t, c.Args, "--shares=8")
	assert.Contains(t, c.Args, "--device-class-name=efa.networking.k8s.aws", "the plugin says at start whether the API server kept the class's extended resource")
	assert.Contains(t, c.Args, "--extended-resource-name=vpc.amazonaws.com/efa")
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

	// Least privilege: no secrets, no pods (the kubelet's PodResources API
	// says which containers use which claims), no wildcard; events only
	// written (the Node's); claims' status patched, the driver
	// subresource only for the driver's name and the plugin's node; one
	// DeviceClass read.
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			assert.Contains(t, []string{"resourceclaims", "resourceclaims/status", "resourceclaims/driver", "deviceclasses", "resourceslices", "nodes", "events"}, res)
			switch res {
			case "events":
				assert.Equal(t, []string{"create", "patch"}, r.Verbs)
			case "resourceclaims/status":
				assert.Equal(t, []string{"patch"}, r.Verbs)
			case "resourceclaims/driver":
				assert.Equal(t, []string{"associated-node:patch"}, r.Verbs)
				assert.Equal(t, []string{"dra.net"}, r.ResourceNames)
			case "deviceclasses":
				assert.Equal(t, []string{"get"}, r.Verbs)
				assert.Equal(t, []string{"efa.networking.k8s.aws"}, r.ResourceNames)
			}
		}
		assert.NotContains(t, r.Verbs, "*")
	}
	assert.Equal(t, []string{"patch"}, ruleVerbs(role, "resourceclaims/status"))
	require.NotNil(t, policy)
	assert.Contains(t, policy.Spec.MatchConditions[0].Expression, "system:serviceaccount:efakit:efakit-plugin")
}

// ruleVerbs are the verbs a role grants on resource.
func ruleVerbs(role *rbacv1.ClusterRole, resource string) []string {
	var out []string
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, resource) {
			out = append(out, r.Verbs...)
		}
	}
	return out
}

// TestChartClaimStatusRBAC: the role lets the plugin write claims'
// status.devices from Kubernetes 1.36, where the API server also checks
// the driver subresource for the plugin's node; before 1.36 the same grant
// would let a node's token rewrite any claim's status, so it is left out
// unless asked for; the value turns it off anywhere.
func TestChartClaimStatusRBAC(t *testing.T) {
	role := func(args ...string) *rbacv1.ClusterRole {
		for _, o := range harness.Render(t, args...) {
			if r, ok := o.(*rbacv1.ClusterRole); ok {
				return r
			}
		}
		t.Fatal("no ClusterRole")
		return nil
	}
	for _, tc := range []struct {
		name  string
		args  []string
		grant bool
	}{
		{"1.37 (this e2e's)", nil, true},
		{"1.36", []string{"--kube-version", "1.36.0"}, true},
		{"1.35", []string{"--kube-version", "1.35.3"}, false},
		{"1.34", []string{"--kube-version", "1.34.0"}, false},
		{"1.34 asked for", []string{"--kube-version", "1.34.0", "--set", "claimStatus.rbac=true"}, true},
		{"1.37 turned off", []string{"--set", "claimStatus.rbac=false"}, false},
		{"1.37 no writes", []string{"--set", "claimStatus.write=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := role(tc.args...)
			if tc.grant {
				assert.Equal(t, []string{"patch"}, ruleVerbs(r, "resourceclaims/status"))
				assert.Equal(t, []string{"associated-node:patch"}, ruleVerbs(r, "resourceclaims/driver"))
			} else {
				assert.Empty(t, ruleVerbs(r, "resourceclaims/status"))
				assert.Empty(t, ruleVerbs(r, "resourceclaims/driver"))
			}
		})
	}
}

// TestChartTestClusterValues: the values for a cluster without EFA or
// without a pod network that reaches the API server (the real node's).
func TestChartTestClusterValues(t *testing.T) {
	for _, o := range harness.Render(t, "--set", "sysfsHostPath=/srv/p5", "--set", "hostNetwork=true",
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
	for _, o := range harness.Render(t) {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			assert.False(t, ds.Spec.Template.Spec.HostNetwork, "not by default")
		}
	}
}

// hostMount is a container's view of a hostPath volume.
type hostMount struct {
	host      string
	hostType  corev1.HostPathType
	readOnly  bool
	recursive *corev1.RecursiveReadOnlyMode
}

// hostMounts are the DaemonSet container's hostPath mounts by mount path.
func hostMounts(t *testing.T, ds *appsv1.DaemonSet) map[string]hostMount {
	t.Helper()
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.HostPath
	}
	out := map[string]hostMount{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		hp := vols[m.Name]
		require.NotNil(t, hp, "volume %s is a hostPath", m.Name)
		require.Nil(t, m.MountPropagation, "%s: recursive read-only needs no propagation", m.MountPath)
		var typ corev1.HostPathType
		if hp.Type != nil {
			typ = *hp.Type
		}
		out[m.MountPath] = hostMount{host: hp.Path, hostType: typ, readOnly: m.ReadOnly, recursive: m.RecursiveReadOnly}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestChartValues(t *testing.T) {
	objs := harness.Render(t, "--set", "groups=mixed", "--set", "driverName=efa.example.com", "--set", "kubelet.pluginsDir=/data/kubelet/plugins/")
	var policy *admissionv1.ValidatingAdmissionPolicy
	for _, o := range objs {
		switch v := o.(type) {
		case *appsv1.DaemonSet:
			args := strings.Join(v.Spec.Template.Spec.Containers[0].Args, " ")
			assert.Contains(t, args, "--groups=mixed")
			assert.Contains(t, args, "--driver-name=efa.example.com")
			// The plugin's directory follows the driver name.
			m := hostMounts(t, v)
			assert.Equal(t, hostMount{host: "/data/kubelet/plugins/efa.example.com", hostType: corev1.HostPathDirectoryOrCreate},
				m["/data/kubelet/plugins/efa.example.com"], "%v", m)
			assert.NotContains(t, m, "/data/kubelet/plugins/")
			assert.NotContains(t, m, "/var/lib/kubelet/plugins/dra.net")
		case *resourceapi.DeviceClass:
			assert.Contains(t, v.Spec.Selectors[0].CEL.Expression, `device.driver == "efa.example.com"`)
		case *admissionv1.ValidatingAdmissionPolicy:
			policy = v
		}
	}
	// The policy holds the plugin to the driver name it publishes under.
	require.NotNil(t, policy)
	var driver string
	for _, v := range policy.Spec.Variables {
		if v.Name == "driverName" {
			driver = v.Expression
		}
	}
	assert.Equal(t, `"efa.example.com"`, driver)

	// No extended resource: the class has none, and the plugin checks none.
	for _, o := range harness.Render(t, "--set", "deviceClasses.extendedResourceName=", "--set", "sharing.mode=capacity", "--set", "sharing.shares=4") {
		switch v := o.(type) {
		case *appsv1.DaemonSet:
			args := strings.Join(v.Spec.Template.Spec.Containers[0].Args, " ")
			assert.NotContains(t, args, "--extended-resource-name")
			assert.Contains(t, args, "--sharing=capacity --shares=4")
		case *resourceapi.DeviceClass:
			assert.Nil(t, v.Spec.ExtendedResourceName)
		}
	}

	// The health policy's values reach the plugin's flags; the defaults
	// are the plugin's own.
	for _, o := range harness.Render(t) {
		if v, ok := o.(*appsv1.DaemonSet); ok {
			args := strings.Join(v.Spec.Template.Spec.Containers[0].Args, " ")
			assert.Contains(t, args, "--health-window=5m --health-limits= --unhealthy-taint-effect=NoSchedule")
		}
	}
	for _, o := range harness.Render(t, "--set", "health.window=2m", "--set", "health.limits=retransmit-timeouts=120", "--set", "health.unhealthyTaintEffect=NoExecute") {
		if v, ok := o.(*appsv1.DaemonSet); ok {
			args := strings.Join(v.Spec.Template.Spec.Containers[0].Args, " ")
			assert.Contains(t, args, "--health-window=2m --health-limits=retransmit-timeouts=120 --unhealthy-taint-effect=NoExecute")
		}
	}

	for _, o := range harness.Render(t, "--set", "admissionPolicy.enabled=false") {
		if _, ok := o.(*admissionv1.ValidatingAdmissionPolicy); ok {
			t.Error("admission policy rendered though disabled")
		}
	}
}

// TestChartSysfsRecursiveReadOnly: the value that turns recursive
// read-only /sys off (or to best effort) for runtimes without it, and a
// misspelt one refused when rendering, not on the node.
func TestChartSysfsRecursiveReadOnly(t *testing.T) {
	for _, mode := range []corev1.RecursiveReadOnlyMode{corev1.RecursiveReadOnlyIfPossible, corev1.RecursiveReadOnlyDisabled} {
		for _, o := range harness.Render(t, "--set", "sysfsRecursiveReadOnly="+string(mode)) {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				m := hostMounts(t, ds)["/sys"]
				assert.True(t, m.readOnly, "/sys stays read-only")
				assert.Equal(t, &mode, m.recursive)
			}
		}
	}
	cmd := exec.Command("go", "tool", "helm", "template", "efakit", "../../deployments/helm/efakit", "--kube-version", "1.34.0",
		"--set", "image.repository=registry.example/efakit-plugin", "--set", "sysfsRecursiveReadOnly=enabled")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "sysfsRecursiveReadOnly is enabled: Enabled, IfPossible or Disabled")
}

// TestChartNodeSelection: by default the DaemonSet selects exactly the
// instance types of internal/fleet's table, and keeps off device-plugin and
// Auto Mode nodes whatever selects the EFA nodes: a label instead of the
// list, extra instance types, or the user's own affinity, which replaces it.
func TestChartNodeSelection(t *testing.T) {
	exclusions := []corev1.NodeSelectorRequirement{
		{Key: "efakit.io/efa-device-plugin", Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: "eks.amazonaws.com/compute-type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"auto"}},
	}
	terms := func(args ...string) []corev1.NodeSelectorTerm {
		for _, o := range harness.Render(t, args...) {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				if len(args) == 0 {
					// The list lives in the DaemonSet only: the DaemonSet
					// controller gives each pod its node's name instead.
					b, err := json.Marshal(ds)
					require.NoError(t, err)
					t.Logf("default DaemonSet: %d bytes of JSON", len(b))
				}
				return ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			}
		}
		t.Fatal("no DaemonSet")
		return nil
	}
	instanceTypes := func(list []string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "node.kubernetes.io/instance-type", Operator: corev1.NodeSelectorOpIn, Values: list}
	}

	assert.Equal(t, []corev1.NodeSelectorTerm{{MatchExpressions: append([]corev1.NodeSelectorRequirement{
		instanceTypes(fleet.InstanceTypes())}, exclusions...)}}, terms())

	assert.Equal(t, []corev1.NodeSelectorTerm{{MatchExpressions: append([]corev1.NodeSelectorRequirement{
		{Key: "example.com/efa", Operator: corev1.NodeSelectorOpExists}}, exclusions...)}},
		terms("--set", "nodeSelection.label=example.com/efa"))

	// An extra type is added once, a listed one not twice.
	assert.Equal(t, []corev1.NodeSelectorTerm{{MatchExpressions: append([]corev1.NodeSelectorRequirement{
		instanceTypes(append(fleet.InstanceTypes(), "trn3.48xlarge"))}, exclusions...)}},
		terms("--set", "nodeSelection.extraInstanceTypes={trn3.48xlarge,p5.48xlarge}"))

	own := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}}
	assert.Equal(t, []corev1.NodeSelectorTerm{own}, terms("--set-json",
		`affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["node-a"]}]}]}}}`))
}

// TestChartNeedsImage: no public image exists, so the chart has no default
// repository. helm template (as helm install renders) fails at once and
// says what to set; helm lint, which renders leniently, names it too.
func TestChartNeedsImage(t *testing.T) {
	const want = "image.repository is required: no public efakit-plugin image exists; build it with make image, push it, and set image.repository"
	out, err := exec.Command("go", "tool", "helm", "template", "efakit", "../../deployments/helm/efakit", "--kube-version", "1.34.0").CombinedOutput()
	require.Error(t, err, "helm template without image.repository: %s", out)
	assert.Contains(t, string(out), want)
	out, err = exec.Command("go", "tool", "helm", "lint", "../../deployments/helm/efakit").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "Missing required value: "+want)
	out, err = exec.Command("go", "tool", "helm", "lint", "../../deployments/helm/efakit", "--set", "image.repository=registry.example/efakit-plugin").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "Missing required value")
}

// TestRBACDocumented: docs/rbac.md's table holds exactly the rules of the
// chart's ClusterRole (default values, Kubernetes 1.37), one row per rule:
// API group, resource, names, verbs.
func TestRBACDocumented(t *testing.T) {
	var role *rbacv1.ClusterRole
	for _, o := range harness.Render(t, "--kube-version", "1.37.0") {
		if r, ok := o.(*rbacv1.ClusterRole); ok {
			role = r
		}
	}
	require.NotNil(t, role)
	var want []string
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				group := "`" + g + "`"
				if g == "" {
					group = "(core)"
				}
				var names, verbs []string
				for _, n := range r.ResourceNames {
					names = append(names, "`"+n+"`")
				}
				for _, v := range r.Verbs {
					verbs = append(verbs, "`"+v+"`")
				}
				want = append(want, strings.Join([]string{group, "`" + res + "`", strings.Join(names, ", "), strings.Join(verbs, ", ")}, " | "))
			}
		}
	}
	doc, err := os.ReadFile("../../docs/rbac.md")
	require.NoError(t, err)
	var got []string
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(l, "| `") && !strings.HasPrefix(l, "| (core)") {
			continue
		}
		c := strings.Split(strings.Trim(l, "|"), "|")
		require.Len(t, c, 5, l)
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		got = append(got, strings.Join(c[:4], " | "))
	}
	assert.ElementsMatch(t, want, got)
}

// TestFleetTableInTheChart: every instance type of internal/fleet's table
// is a label value the API accepts in a node selector, and the chart's
// values, read as Helm reads them, hold exactly the table's, whatever the
// text around them.
func TestFleetTableInTheChart(t *testing.T) {
	for _, it := range fleet.InstanceTypes() {
		assert.Empty(t, validation.IsValidLabelValue(it), it)
	}
	b, err := os.ReadFile("../../deployments/helm/efakit/values.yaml")
	require.NoError(t, err)
	var v struct {
		NodeSelection struct {
			Label              string   `json:"label"`
			InstanceTypes      []string `json:"instanceTypes"`
			ExtraInstanceTypes []string `json:"extraInstanceTypes"`
		} `json:"nodeSelection"`
		Affinity map[string]any `json:"affinity"`
	}
	require.NoError(t, yaml.Unmarshal(b, &v))
	assert.Equal(t, fleet.InstanceTypes(), v.NodeSelection.InstanceTypes)
	assert.Empty(t, v.NodeSelection.Label, "the list is the default")
	assert.Empty(t, v.NodeSelection.ExtraInstanceTypes)
	assert.Empty(t, v.Affinity, "an affinity in the values would replace the list")
}
