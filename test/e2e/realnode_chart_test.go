package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

const chartImage = "ghcr.io/efakit/efakit-plugin"

// groupsLabel is the node label TestRealNodeChart gives the chart as
// groupsNodeLabel.
const groupsLabel = "efakit.io/groups"

// importPluginImage builds the efakit-plugin image as `make image` does
// (tools/image) and imports it into the node's containerd as
// chartImage:e2e.
func (n *realNode) importPluginImage() {
	t := n.T
	out := filepath.Join(n.Dir, "images", "efakit-plugin")
	b := exec.Command("go", "run", ".", "-o", out, "-version", "e2e")
	b.Dir = "../../tools/image"
	o, err := b.CombinedOutput()
	require.NoError(t, err, "tools/image: %s", o)
	idx, err := layout.ImageIndexFromPath(out)
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	// The layout names one image index, one image per platform: the
	// node's containerd runs this machine's.
	platforms, err := idx.ImageIndex(m.Manifests[0].Digest)
	require.NoError(t, err)
	pm, err := platforms.IndexManifest()
	require.NoError(t, err)
	var img v1.Image
	for _, d := range pm.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH {
			img, err = platforms.Image(d.Digest)
			require.NoError(t, err)
		}
	}
	require.NotNil(t, img, "tools/image: no linux/%s image", goruntime.GOARCH)
	tag, err := name.NewTag(chartImage + ":e2e")
	require.NoError(t, err)
	file := out + ".tar"
	require.NoError(t, tarball.WriteToFile(file, tag, img))
	o, err = exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "images", "import", file).CombinedOutput()
	require.NoError(t, err, "ctr images import: %s", o)
}

// TestRealNodeChart installs the chart as a user would (helm template,
// every object created on the API server) and lets the real DaemonSet
// controller and kubelet run the efakit-plugin image on the node, with the
// chart's security context (root, every capability dropped, read-only root
// file system, RuntimeDefault seccomp), its probes and its pod-bound
// service account token under its admission policy. Values differ from the
// defaults only where this machine needs it: the image is imported (pull
// policy Never), the kubelet's directories are the node's, /sys is an
// unpacked p5 capture, the pod uses the host's network and is told the API
// server's loopback address (no kube-proxy runs here, and the pod network
// reaches nothing outside the pods), and the node is selected by name. The
// plugin container's mounts are read from the node (its process's root and
// mount table): a file system mounted under the host's /sys is read-only in
// it, and of the kubelet's plugins directory it sees and writes only its
// driver's own. A pod then runs with an EFA prepared by the plugin pod.
func TestRealNodeChart(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.importPluginImage()
	const ns = "efakit-node"
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))
	port, err := harness.FreePort()
	require.NoError(t, err)
	apiPort := c.URL[strings.LastIndex(c.URL, ":")+1:]
	// A file system under /sys, as cgroup, bpf or debugfs are on a node
	// (a tmpfs in the node's mount namespace), and another driver's
	// directory beside the plugin's in the kubelet's plugins directory.
	sysDir := n.Unpack(p5Fixture)
	subMount := filepath.Join(sysDir, "fs", "cgroup")
	require.NoError(t, os.MkdirAll(subMount, 0o755))
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.Holder.Process.Pid), "-m", "--",
		"mount", "-t", "tmpfs", "-o", "mode=0755", "efakit-e2e", subMount).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pluginsDir := filepath.Join(n.Kubelet, "plugins")
	otherDriver := filepath.Join(pluginsDir, "gpu.example.com")
	require.NoError(t, os.MkdirAll(otherDriver, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(otherDriver, "checkpoint.json"), []byte("{}"), 0o600))
	values := fmt.Sprintf(`image: {repository: %s, tag: e2e, pullPolicy: Never}
kubelet: {pluginsDir: %s, registrarDir: %s, podResourcesDir: %s}
cdiRoot: %s
sysfsHostPath: %s
metrics: {port: %d}
hostNetwork: true
groupsNodeLabel: %s
extraEnv:
- {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
- {name: KUBERNETES_SERVICE_PORT, value: %q}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [%s]}
`, chartImage, pluginsDir, filepath.Join(n.Kubelet, "plugins_registry"), filepath.Join(n.Kubelet, "pod-resources"), n.CDI, sysDir, port, groupsLabel, apiPort, n.Name)
	valuesFile := filepath.Join(n.Dir, "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, []byte(values), 0o644))
	var objs []runtime.Object
	for _, o := range harness.RenderRelease(t, ns, ns, "-f", valuesFile) {
		if _, ok := o.(*resourceapi.DeviceClass); ok {
			// Cluster-wide, and made already by other tests.
			_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, o.(*resourceapi.DeviceClass), metav1.CreateOptions{})
			require.NoError(t, harness.CreateIgnoreExists(err))
			continue
		}
		objs = append(objs, o)
	}
	harness.Apply(t, c.Config, objs)
	t.Cleanup(func() {
		_ = c.Client.AppsV1().DaemonSets(ns).Delete(context.Background(), ns+"-plugin", metav1.DeleteOptions{})
	})

	// The DaemonSet's pod runs on the node and turns ready (registered
	// with the kubelet).
	var pod *corev1.Pod
	harness.Eventually(t, func() bool {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false
		}
		pod = &l.Items[0]
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}, 120*time.Second, 200*time.Millisecond, func() string {
		return fmt.Sprintf("the chart's plugin pod ready; pod: %+v\nkubelet:\n%s", podStatus(pod), n.LogTail("kubelet", 4000))
	})
	// The DaemonSet controller counts the pod after it turned ready.
	assert.Eventually(t, func() bool {
		ds, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, ns+"-plugin", metav1.GetOptions{})
		return err == nil && ds.Status.NumberReady == 1
	}, 30*time.Second, 200*time.Millisecond, "the DaemonSet's status: one pod ready")
	n.WaitEFAs(t, 32)

	// The container's view, from the node.
	require.Len(t, pod.Status.ContainerStatuses, 1)
	cs := pod.Status.ContainerStatuses[0]
	pid := n.taskPID(t, strings.TrimPrefix(cs.ContainerID, "containerd://"))
	root := fmt.Sprintf("/proc/%d/root", pid)
	mounts := mountTable(t, pid)
	t.Run("sys-read-only-with-submounts", func(t *testing.T) {
		for _, p := range []string{"/sys", "/sys/fs/cgroup"} {
			require.Contains(t, mounts, p, "the plugin's mount table: %v", mounts)
			assert.Contains(t, strings.Split(mounts[p], ","), "ro", "%s is mounted read-only in the plugin", p)
			assert.ErrorIs(t, os.WriteFile(root+p+"/efakit-e2e", nil, 0o644), syscall.EROFS, "%s: writing refused", p)
		}
		// The kubelet reports what the runtime made of the mount.
		var rro *corev1.RecursiveReadOnlyMode
		for _, m := range cs.VolumeMounts {
			if m.MountPath == "/sys" {
				rro = m.RecursiveReadOnly
			}
		}
		assert.Equal(t, ptr(corev1.RecursiveReadOnlyEnabled), rro, "the pod's status: /sys recursively read-only")
	})
	t.Run("only-the-driver's-plugin-directory", func(t *testing.T) {
		assert.Contains(t, mounts, filepath.Join(pluginsDir, "dra.net"))
		assert.NotContains(t, mounts, pluginsDir)
		_, err := os.Stat(root + otherDriver)
		assert.ErrorIs(t, err, fs.ErrNotExist, "another driver's directory is not in the plugin's view")
		assert.ErrorIs(t, os.WriteFile(root+pluginsDir+"/efakit-e2e", nil, 0o644), syscall.EROFS,
			"nothing in the plugins directory beside the driver's own is writable")
	})

	// The plugin pod's slices passed the chart's admission policy with the
	// pod's own token; a pod gets its EFA through it.
	harness.CreateSeed(t, c, "seed-claims.yaml")
	got, claims := n.run(t, n.PrinterPod("via-chart", harness.TemplateClaim("efa", "single-efa-claim")))
	require.Len(t, got.Nodes, 1)
	n.check(t, got, fixtureNodes(t, p5Fixture), claimsOf(claims), nil)
	n.deletePod(t, "via-chart")
	// The libfabric environment's check asks the node's kubelet (its
	// PodResources API, mounted read-only; no Pod read from the API
	// server): a claim with env: libfabric runs with its variables.
	assert.Contains(t, strings.Split(mounts[filepath.Join(n.Kubelet, "pod-resources")], ","), "ro", "the pod-resources directory, read-only")
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chart-env", Namespace: harness.NodeNS}}
	tmpl.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 1}}}
	tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"efa"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: resources.DefaultDriverName, Parameters: runtimeRaw(`{"apiVersion": "efakit.io/v1alpha1", "kind": "EFAConfig", "env": "libfabric"}`)}}}}
	_, err = c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, tmpl, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))
	withEnv, _ := n.run(t, n.PrinterPod("via-chart-env", harness.TemplateClaim("efa", "chart-env")))
	assert.Equal(t, "efa", withEnv.Env["FI_PROVIDER"], "the libfabric environment, checked through the kubelet")
	assert.NotEmpty(t, withEnv.Env["FI_EFA_IFACE"])
	n.deletePod(t, "via-chart-env")
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(logs), `"Prepared claim"`, "the plugin pod prepared the claim")
	_, err = os.Stat(filepath.Join(pluginsDir, "dra.net", "checkpoint.json"))
	assert.NoError(t, err, "the checkpoint, in the driver's directory on the host")

	// groupsNodeLabel: the node had no such label, so the default mode;
	// labelled exclusive, the plugin stops, the kubelet starts its
	// container again, and it publishes the node's EFA groups (one per
	// PCIe root), which pass the admission policy with the pod's token.
	cfg := resources.Config{DriverName: resources.DefaultDriverName, NodeName: n.Name, Groups: resources.GroupsExclusive}
	pool, err := resources.Published(harness.ScanFixture(t, p5Fixture), cfg)
	require.NoError(t, err)
	groups := 0
	for _, s := range resources.Slices(pool, cfg) {
		groups += len(s.Spec.Devices)
	}
	require.Positive(t, groups)
	restarts := cs.RestartCount
	label := func(value string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, groupsLabel, value)
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	label(`"exclusive"`)
	t.Cleanup(func() { label("null") })
	harness.Eventually(t, func() bool {
		devs := n.PublishedEFAs(t)
		for _, d := range devs {
			if k := d.Attributes[resources.AttrKind].StringValue; k == nil || *k != resources.KindGroup {
				return false
			}
		}
		return len(devs) == groups
	}, 120*time.Second, 500*time.Millisecond, func() string {
		return fmt.Sprintf("%d dra.net devices published, not the %d groups; kubelet:\n%s", len(n.PublishedEFAs(t)), groups, n.LogTail("kubelet", 3000))
	})
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, p.Status.ContainerStatuses, 1)
	assert.Equal(t, restarts+1, p.Status.ContainerStatuses[0].RestartCount, "the plugin restarted once, in the labelled mode")
	logs, err = c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Previous: true}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(logs), groupsLabel, "the stopped plugin's log names the label that changed")

	// Uninstalled: the DaemonSet goes, and its pod (which the garbage
	// collector, not run here, would delete) stops on SIGTERM well within
	// its 30 s grace period.
	orphan := metav1.DeletePropagationOrphan
	require.NoError(t, c.Client.AppsV1().DaemonSets(ns).Delete(ctx, ns+"-plugin", metav1.DeleteOptions{PropagationPolicy: &orphan}))
	start := time.Now()
	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 200*time.Millisecond, "the plugin pod gone")
	assert.Less(t, time.Since(start), 20*time.Second, "the plugin stopped on SIGTERM, not at the end of its grace period")

	// The kubelet deletes the node's slices of a driver 30 s after its
	// last plugin went (its wiping delay): an uninstall leaves none.
	gone := time.Now()
	harness.Eventually(t, func() bool { return len(n.PublishedEFAs(t)) == 0 }, 90*time.Second, 500*time.Millisecond,
		func() string { return fmt.Sprintf("%d dra.net devices still published", len(n.PublishedEFAs(t))) })
	t.Logf("the node's dra.net slices deleted %s after the plugin stopped", time.Since(gone).Round(time.Second))
}

// taskPID is the node's PID of a container's process (containerd's task).
func (n *realNode) taskPID(t *testing.T, id string) int {
	out, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	require.NoError(t, err, "ctr tasks ls: %s", out)
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			require.NoError(t, err, "ctr tasks ls: %s", l)
			return pid
		}
	}
	t.Fatalf("no task %s in ctr tasks ls:\n%s", id, out)
	return 0
}

// mountTable is a process's mount table (/proc/PID/mountinfo, as the
// process reads /proc/self/mountinfo): each mount point, in the process's
// view, with its mount options (the last mount at a point wins).
func mountTable(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// ID parent major:minor root mount-point options ...
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 6, "mountinfo line %q", l)
		out[f[4]] = f[5]
	}
	return out
}

func podStatus(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}
