package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// startScheduler runs the real kube-scheduler against the control plane.
func (c *controlPlane) startScheduler() error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins, "kube-scheduler"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.dir, "admin.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
`, c.url, adminToken)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	return c.start(filepath.Join(bins, "kube-scheduler"), "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port))
}

func createIgnoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// TestSchedulerPairsEFAs runs the users' claims and the templates `efakit
// claims` prints through the real kube-scheduler, against the slices the
// plugin publishes for a p5 node (the plugin running on the fixture, with
// the real API server), and prepares them over the plugin's socket as the
// kubelet does.
func TestSchedulerPairsEFAs(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startScheduler())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "p5-node"
	fixture := "../../testdata/sysfs/p5.48xlarge.sysfs"

	// No controller manager: the service account a pod needs by default.
	_, err := c.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, createIgnoreExists(err))

	// The node, ready and schedulable, as a kubelet would register it.
	n, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	require.NoError(t, err)
	n.Status.Capacity = corev1.ResourceList{"cpu": resource.MustParse("192"), "memory": resource.MustParse("2Ti"), "pods": resource.MustParse("110")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	n, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	// The API server taints a new node not-ready; no node lifecycle
	// controller runs here to lift it once it is Ready.
	n.Spec.Taints = nil
	_, err = c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Classes: efakit's and NVIDIA's; and GPU slices shaped like NVIDIA's
	// driver's for the same machine.
	root, err := sysfs.Open(fixture)
	require.NoError(t, err)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	for _, dc := range append(driver.DeviceClasses("", ""), &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`}}}},
	}) {
		_, err := c.client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		require.NoError(t, createIgnoreExists(err))
	}
	var gpus []resourceapi.Device
	gpuRoot := map[string]string{}
	for _, g := range topo.Of(topology.KindGPU) {
		s, _ := topo.StandardAttributes(g)
		root, bus, typ := s.PCIeRoot, s.PCIBusID, "gpu"
		name := strings.ToLower(g.Name)
		gpuRoot[name] = root
		gpus = append(gpus, resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			driver.AttrPCIeRoot: {StringValue: &root}, driver.AttrPCIBusID: {StringValue: &bus}, "type": {StringValue: &typ}}})
	}
	nodeName := node
	_, err = c.client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpus-" + node},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: gpus}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The plugin, as the DaemonSet runs it, on the fixture.
	dir, err := os.MkdirTemp("", "efa")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	for _, d := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "proc/sys/kernel/random/boot_id"), []byte("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11\n"), 0o644))
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- driver.Serve(ctx, driver.ServeOptions{Config: driver.Config{NodeName: node}, KubeClient: c.client, SysfsRoot: fixture,
			ProcRoot: filepath.Join(dir, "proc"), CDIRoot: filepath.Join(dir, "cdi"), RegistrarDir: filepath.Join(dir, "reg"),
			PluginsDir: filepath.Join(dir, "plugins"), Ready: ready})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("plugin stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("plugin not ready")
	}
	regConn, err := grpc.NewClient("unix://"+filepath.Join(dir, "reg", "dra.net-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer regConn.Close()
	info, err := registerapi.NewRegistrationClient(regConn).GetInfo(ctx, &registerapi.InfoRequest{})
	require.NoError(t, err)
	_, err = registerapi.NewRegistrationClient(regConn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	draConn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer draConn.Close()
	dra := drapb.NewDRAPluginClient(draConn)

	// The published slices reach the API server.
	efaRoot := map[string]string{}
	require.Eventually(t, func() bool {
		l, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + node})
		if err != nil || len(l.Items) != 1 || len(l.Items[0].Spec.Devices) != 32 {
			return false
		}
		for _, d := range l.Items[0].Spec.Devices {
			efaRoot[d.Name] = *d.Attributes[driver.AttrPCIeRoot].StringValue
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the plugin's 32 EFAs on the API server")

	// schedule creates a claim from spec and pods using it, waits until
	// the scheduler allocated it and bound them, and prepares it as the
	// kubelet would, once for the node.
	w, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "dra.net")
	require.NoError(t, err)
	schedule := func(name string, spec resourceapi.ResourceClaimSpec, pods int) (*resourceapi.ResourceClaim, []string) {
		t.Helper()
		claim, err := c.client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
		require.NoError(t, err)
		for i := range pods {
			cn := name
			_, err := c.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i)},
				Spec: corev1.PodSpec{
					ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: &cn}},
					Containers: []corev1.Container{{Name: "app", Image: "app",
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "c"}}}}},
				},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		scheduled := func() bool {
			for i := range pods {
				p, err := c.client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
				if err != nil || p.Spec.NodeName != node {
					return false
				}
			}
			claim, err = c.client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && claim.Status.Allocation != nil
		}
		for deadline := time.Now().Add(60 * time.Second); !scheduled(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				p, _ := c.client.CoreV1().Pods("default").Get(ctx, name+"-0", metav1.GetOptions{})
				t.Fatalf("%s: not scheduled: pod status %+v\nscheduler log:\n%s", name, p.Status, c.logTail("kube-scheduler", 3000))
			}
		}
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: name, Uid: string(claim.UID)}}})
		require.NoError(t, err)
		r := resp.Claims[string(claim.UID)]
		require.NotNil(t, r)
		require.Empty(t, r.Error, name)
		spec2, err := w.Load(string(claim.UID))
		require.NoError(t, err)
		var nodes []string
		for _, d := range spec2.Devices {
			for _, dn := range d.ContainerEdits.DeviceNodes {
				nodes = append(nodes, dn.Path)
			}
		}
		sort.Strings(nodes)
		return claim, nodes
	}
	// byReq maps each request of an allocation to its devices.
	byReq := func(cl *resourceapi.ResourceClaim) map[string][]string {
		out := map[string][]string{}
		for _, r := range cl.Status.Allocation.Devices.Results {
			out[r.Request] = append(out[r.Request], r.Device)
		}
		return out
	}

	// The users' aligned-efa-nvidia: the EFA shares the GPU's root.
	var tmpl resourceapi.ResourceClaimTemplate
	for _, doc := range strings.Split(readClaims(t), "\n---") {
		if strings.Contains(doc, "name: aligned-efa-nvidia\n") {
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tmpl))
		}
	}
	require.Equal(t, "aligned-efa-nvidia", tmpl.Name)
	claim, nodes := schedule("pair", tmpl.Spec.Spec, 1)
	reqs := byReq(claim)
	require.Len(t, reqs["1-efa"], 1)
	assert.Equal(t, gpuRoot[reqs["1-gpu"][0]], efaRoot[reqs["1-efa"][0]], "EFA and GPU on one PCIe root")
	assert.Len(t, nodes, 1, "exactly the allocated uverbs device")

	// One claim shared by two pods: both bound, the same four EFAs.
	shared := resourceapi.ResourceClaimSpec{}
	shared.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 4}}}
	claim, nodes = schedule("shared", shared, 2)
	assert.Len(t, claim.Status.ReservedFor, 2, "reserved for both pods")
	assert.Len(t, nodes, 4)

	// efakit's "GPU with its EFAs", for the GPUs left: each claim gets the
	// four EFAs behind its GPU's switch.
	tms, _ := driver.ClaimTemplates(topo, driver.GroupsNone, "")
	var gpuWithEFAs *resourceapi.ResourceClaimTemplate
	for _, tm := range tms {
		if tm.Template.Name == "gpu-with-efas" {
			gpuWithEFAs = tm.Template
		}
	}
	require.NotNil(t, gpuWithEFAs)
	for i := range 6 { // 8 GPUs: one went to "pair"; the shared claim took 4 EFAs of some root
		claim, nodes := schedule(fmt.Sprintf("gpu-efas-%d", i), gpuWithEFAs.Spec.Spec, 1)
		reqs := byReq(claim)
		require.Len(t, reqs["efas"], 4)
		for _, e := range reqs["efas"] {
			assert.Equal(t, gpuRoot[reqs["gpu"][0]], efaRoot[e])
		}
		assert.Len(t, nodes, 4)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("plugin did not stop")
	}
}

func readClaims(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"../../../shared/claims/seed-claims.yaml", "../../testdata/claims/seed-claims.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			return string(b)
		}
	}
	t.Fatal("no seed-claims.yaml")
	return ""
}
