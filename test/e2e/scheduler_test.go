package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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

var schedOnce sync.Once
var schedErr error

// startSchedulerOnce starts kube-scheduler and kube-controller-manager (for
// ResourceClaims made from templates) for the test binary.
func (c *controlPlane) startSchedulerOnce() error {
	schedOnce.Do(func() {
		if schedErr = c.startScheduler(); schedErr == nil {
			schedErr = c.startControllerManager()
		}
	})
	return schedErr
}

// startControllerManager runs kube-controller-manager with the resource
// claim controller, which turns a pod's ResourceClaimTemplate into its
// ResourceClaim.
func (c *controlPlane) startControllerManager() error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins, "kube-controller-manager"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	return c.start(filepath.Join(bins, "kube-controller-manager"), "--kubeconfig", filepath.Join(c.dir, "admin.kubeconfig"),
		"--leader-elect=false", "--controllers=resourceclaim-controller", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port))
}

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

// e2eNode is one node of the e2e cluster: its Node object, NVIDIA-shaped
// GPU slices, and efakit's plugin running on a fixture with a kubelet
// stand-in registered over the plugin's sockets.
type e2eNode struct {
	t       *testing.T
	c       *controlPlane
	name    string
	fixture string
	mode    driver.GroupMode
	dir     string
	topo    *topology.Topology
	gpuRoot map[string]string // GPU device -> pcieRoot
	efaRoot map[string]string // published device -> pcieRoot
	cancel  context.CancelFunc
	done    chan error
	rescan  chan struct{}
	dra     drapb.DRAPluginClient
	conns   []*grpc.ClientConn
	cdi     *cdi.Writer
}

func newE2ENode(t *testing.T, c *controlPlane, name, fixture string, mode driver.GroupMode) *e2eNode {
	t.Helper()
	ctx := context.Background()
	n := &e2eNode{t: t, c: c, name: name, fixture: fixture, mode: mode, gpuRoot: map[string]string{}, efaRoot: map[string]string{}}
	// No controller manager: the service account a pod needs by default.
	_, err := c.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, createIgnoreExists(err))

	// The node, ready and schedulable, as a kubelet would register it.
	node, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	node.Status.Capacity = corev1.ResourceList{"cpu": resource.MustParse("192"), "memory": resource.MustParse("2Ti"), "pods": resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	node, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	// The API server taints a new node not-ready; no node lifecycle
	// controller runs here to lift it once it is Ready.
	node.Spec.Taints = nil
	_, err = c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Classes: efakit's and NVIDIA's; and GPU slices shaped like NVIDIA's
	// driver's for the same machine.
	root, err := sysfs.Open(fixture)
	require.NoError(t, err)
	n.topo, err = topology.Scan(root)
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
	for _, g := range n.topo.Of(topology.KindGPU) {
		s, _ := n.topo.StandardAttributes(g)
		root, bus, typ := s.PCIeRoot, s.PCIBusID, "gpu"
		dev := strings.ToLower(g.Name)
		n.gpuRoot[dev] = root
		gpus = append(gpus, resourceapi.Device{Name: dev, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			driver.AttrPCIeRoot: {StringValue: &root}, driver.AttrPCIBusID: {StringValue: &bus}, "type": {StringValue: &typ}}})
	}
	nodeName := name
	_, err = c.client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpus-" + name},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: gpus}}, metav1.CreateOptions{})
	require.NoError(t, err)

	n.dir, err = os.MkdirTemp("", "efa")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(n.dir) })
	for _, d := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
		require.NoError(t, os.MkdirAll(filepath.Join(n.dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(n.dir, "proc/sys/kernel/random/boot_id"), []byte("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11\n"), 0o644))
	n.cdi, err = cdi.NewWriter(filepath.Join(n.dir, "cdi"), "dra.net")
	require.NoError(t, err)
	n.start()
	t.Cleanup(n.stop)
	return n
}

// start runs the plugin, as the DaemonSet does, and registers it as the
// kubelet does.
func (n *e2eNode) start() {
	t := n.t
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	n.cancel, n.done, n.rescan = cancel, make(chan error, 1), make(chan struct{})
	go func() {
		n.done <- driver.Serve(ctx, driver.ServeOptions{Config: driver.Config{NodeName: n.name, Groups: n.mode}, KubeClient: n.c.client, SysfsRoot: n.fixture,
			ProcRoot: filepath.Join(n.dir, "proc"), CDIRoot: filepath.Join(n.dir, "cdi"), RegistrarDir: filepath.Join(n.dir, "reg"),
			PluginsDir: filepath.Join(n.dir, "plugins"), Ready: ready, Rescan: n.rescan})
	}()
	select {
	case <-ready:
	case err := <-n.done:
		t.Fatalf("plugin stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("plugin not ready")
	}
	regConn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "reg", "dra.net-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	reg := registerapi.NewRegistrationClient(regConn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	require.NoError(t, err)
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	draConn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	n.conns = []*grpc.ClientConn{regConn, draConn}
	n.dra = drapb.NewDRAPluginClient(draConn)
}

func (n *e2eNode) stop() {
	if n.cancel == nil {
		return
	}
	for _, c := range n.conns {
		c.Close()
	}
	n.cancel()
	select {
	case err := <-n.done:
		require.NoError(n.t, err)
	case <-time.After(20 * time.Second):
		n.t.Fatal("plugin did not stop")
	}
	n.cancel = nil
}

// slices waits for the plugin's slices of the node on the API server and
// returns them, noting each device's root.
func (n *e2eNode) slices(devices int) []resourceapi.ResourceSlice {
	n.t.Helper()
	var out []resourceapi.ResourceSlice
	require.Eventually(n.t, func() bool {
		l, err := n.c.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.name})
		if err != nil {
			return false
		}
		got := 0
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				n.efaRoot[d.Name] = *d.Attributes[driver.AttrPCIeRoot].StringValue
				got++
			}
		}
		out = l.Items
		return got == devices
	}, 30*time.Second, 100*time.Millisecond, "%s: the plugin's %d devices on the API server", n.name, devices)
	return out
}

// schedule creates a claim from spec and pods using it on this node, waits
// until the real scheduler allocated it and bound them, and prepares it as
// the kubelet would, once for the node. It returns the claim and the uverbs
// nodes of its CDI spec.
func (n *e2eNode) schedule(name string, spec resourceapi.ResourceClaimSpec, pods int) (*resourceapi.ResourceClaim, []string) {
	t, ctx, c := n.t, context.Background(), n.c
	t.Helper()
	claim, err := c.client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range pods {
		cn := name
		_, err := c.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i)},
			Spec: corev1.PodSpec{
				NodeSelector:   map[string]string{"kubernetes.io/hostname": n.name},
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
			if err != nil || p.Spec.NodeName != n.name {
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
	return claim, n.prepare(claim)
}

// prepare calls NodePrepareResources for a claim as the kubelet does and
// returns the uverbs nodes of the CDI spec the plugin wrote.
func (n *e2eNode) prepare(claim *resourceapi.ResourceClaim) []string {
	t := n.t
	t.Helper()
	resp, err := n.dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	require.NoError(t, err)
	r := resp.Claims[string(claim.UID)]
	require.NotNil(t, r)
	require.Empty(t, r.Error, claim.Name)
	spec, err := n.cdi.Load(string(claim.UID))
	require.NoError(t, err)
	var nodes []string
	for _, d := range spec.Devices {
		for _, dn := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, dn.Path)
		}
	}
	sort.Strings(nodes)
	return nodes
}

// byReq maps each request of an allocation to its devices.
func byReq(cl *resourceapi.ResourceClaim) map[string][]string {
	out := map[string][]string{}
	for _, r := range cl.Status.Allocation.Devices.Results {
		out[r.Request] = append(out[r.Request], r.Device)
	}
	return out
}

func template(t *testing.T, tms []driver.Template, name string) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	for _, tm := range tms {
		if tm.Template.Name == name {
			return tm.Template
		}
	}
	t.Fatalf("no template %s", name)
	return nil
}

// TestSchedulerPairsEFAs runs the users' claims and the templates `efakit
// claims` prints through the real kube-scheduler, against the slices the
// plugin publishes for a p5 node (the plugin on the fixture, with the real
// API server), and prepares them over the plugin's socket as the kubelet
// does. Then it deletes the plugin's slice, restarts the plugin and wipes
// its CDI directory: each heals, and no prepared claim is lost.
func TestSchedulerPairsEFAs(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	ctx := context.Background()
	n := newE2ENode(t, c, "p5-node", "../../testdata/sysfs/p5.48xlarge.sysfs", driver.GroupsNone)
	published := n.slices(32)

	// A steady node makes no API writes: two rescans later, the slice is
	// the same object.
	n.rescan <- struct{}{}
	n.rescan <- struct{}{}
	time.Sleep(500 * time.Millisecond)
	again := n.slices(32)
	assert.Equal(t, published[0].ResourceVersion, again[0].ResourceVersion, "a rescan that finds nothing new writes nothing")

	// The users' aligned-efa-nvidia: the EFA shares the GPU's root.
	var tmpl resourceapi.ResourceClaimTemplate
	for _, doc := range strings.Split(readClaims(t), "\n---") {
		if strings.Contains(doc, "name: aligned-efa-nvidia\n") {
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tmpl))
		}
	}
	require.Equal(t, "aligned-efa-nvidia", tmpl.Name)
	pair, pairNodes := n.schedule("pair", tmpl.Spec.Spec, 1)
	reqs := byReq(pair)
	require.Len(t, reqs["1-efa"], 1)
	assert.Equal(t, n.gpuRoot[reqs["1-gpu"][0]], n.efaRoot[reqs["1-efa"][0]], "EFA and GPU on one PCIe root")
	assert.Len(t, pairNodes, 1, "exactly the allocated uverbs device")

	// One claim shared by two pods: both bound, the same four EFAs.
	shared := resourceapi.ResourceClaimSpec{}
	shared.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 4}}}
	claim, nodes := n.schedule("shared", shared, 2)
	assert.Len(t, claim.Status.ReservedFor, 2, "reserved for both pods")
	assert.Len(t, nodes, 4)

	// efakit's "GPU with its EFAs" for the GPUs left: each claim gets the
	// four EFAs behind its GPU's switch. The scheduler fills first, so the
	// pair and the shared claim used the first two roots.
	tms, _ := driver.ClaimTemplates(n.topo, driver.GroupsNone, "")
	gpuWithEFAs := template(t, tms, "gpu-with-efas")
	for i := range 6 {
		claim, nodes := n.schedule(fmt.Sprintf("gpu-efas-%d", i), gpuWithEFAs.Spec.Spec, 1)
		reqs := byReq(claim)
		require.Len(t, reqs["efas"], 4)
		for _, e := range reqs["efas"] {
			assert.Equal(t, n.gpuRoot[reqs["gpu"][0]], n.efaRoot[e])
		}
		assert.Len(t, nodes, 4)
	}

	// A deleted ResourceSlice comes back.
	require.NoError(t, c.client.ResourceV1().ResourceSlices().Delete(ctx, published[0].Name, metav1.DeleteOptions{}))
	n.slices(32)

	// A plugin restart, and a CDI directory wiped while the claims stay
	// prepared: the specs are written again, and the claims are still held.
	n.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(n.dir, "cdi")))
	n.start()
	_, err := n.cdi.Load(string(pair.UID))
	require.NoError(t, err, "the pair's CDI spec is back after the restart, before any call")
	assert.Equal(t, pairNodes, n.prepare(pair), "the same device, prepared again after the restart")
	resp, err := n.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: pair.Name, Uid: string(pair.UID)}}})
	require.NoError(t, err)
	assert.Empty(t, resp.Claims[string(pair.UID)].Error)
	_, err = n.cdi.Load(string(pair.UID))
	assert.ErrorIs(t, err, os.ErrNotExist, "unprepared: its spec is gone")
}

// TestSchedulerTemplates: pods that name a ResourceClaimTemplate (the
// users' aligned-efa-nvidia, one claim per pod) get their claims from the
// real controller manager, the scheduler pairs each, and each prepares.
func TestSchedulerTemplates(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	ctx := context.Background()
	n := newE2ENode(t, c, "p4d-node", "../../testdata/sysfs/p4d.24xlarge.sysfs", driver.GroupsNone)
	n.slices(4)
	var tmpl resourceapi.ResourceClaimTemplate
	for _, doc := range strings.Split(readClaims(t), "\n---") {
		if strings.Contains(doc, "name: aligned-efa-nvidia\n") {
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tmpl))
		}
	}
	tmpl.Namespace = "default"
	tmpl.Name = "p4d-aligned-efa-nvidia"
	_, err := c.client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, &tmpl, metav1.CreateOptions{})
	require.NoError(t, err)
	// p4d has four roots, each with one EFA: four pods fit.
	for i := range 4 {
		tn := tmpl.Name
		_, err := c.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tmpl-%d", i)},
			Spec: corev1.PodSpec{
				NodeSelector:   map[string]string{"kubernetes.io/hostname": n.name},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimTemplateName: &tn}},
				Containers: []corev1.Container{{Name: "app", Image: "app",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "c"}}}}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	roots := map[string]bool{}
	for i := range 4 {
		var claim *resourceapi.ResourceClaim
		require.Eventually(t, func() bool {
			p, err := c.client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("tmpl-%d", i), metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != n.name || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				return false
			}
			claim, err = c.client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			return err == nil && claim.Status.Allocation != nil
		}, 60*time.Second, 200*time.Millisecond, "pod tmpl-%d: claim from the template, allocated, bound", i)
		reqs := byReq(claim)
		assert.Equal(t, n.gpuRoot[reqs["1-gpu"][0]], n.efaRoot[reqs["1-efa"][0]])
		roots[n.efaRoot[reqs["1-efa"][0]]] = true
		assert.Len(t, n.prepare(claim), 1)
	}
	assert.Len(t, roots, 4, "one pod per root")
}

// TestSchedulerGroupModes: the "GPUs with their EFA group" template through
// the real scheduler on p5en nodes publishing groups, exclusive and mixed;
// a group prepares as every EFA of its root.
func TestSchedulerGroupModes(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	for _, mode := range []driver.GroupMode{driver.GroupsExclusive, driver.GroupsMixed} {
		t.Run(string(mode), func(t *testing.T) {
			n := newE2ENode(t, c, "p5en-"+string(mode), "../../testdata/sysfs/p5en.48xlarge.sysfs", mode)
			devices := 4 // four roots, one group each
			if mode == driver.GroupsMixed {
				devices += 16
			}
			n.slices(devices)
			tms, _ := driver.ClaimTemplates(n.topo, mode, "")
			tm := template(t, tms, "gpus-with-efa-group")
			for i := range 4 {
				claim, nodes := n.schedule(fmt.Sprintf("%s-group-%d", mode, i), tm.Spec.Spec, 1)
				reqs := byReq(claim)
				require.Len(t, reqs["gpus"], 2)
				require.Len(t, reqs["efas"], 1)
				for _, g := range reqs["gpus"] {
					assert.Equal(t, n.gpuRoot[g], n.efaRoot[reqs["efas"][0]], "the group of the GPUs' root")
				}
				assert.Len(t, nodes, 4, "a group gives the container all four EFAs of its root")
			}
		})
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

// TestAPIServerRestart: the API server goes away and comes back; the
// plugin's slices and prepared claims survive, and a slice deleted
// afterwards is published again (the plugin's watch reconnected).
func TestAPIServerRestart(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	ctx := context.Background()
	n := newE2ENode(t, c, "p5-restart", "../../testdata/sysfs/p5.48xlarge.sysfs", driver.GroupsNone)
	n.slices(32)
	one := resourceapi.ResourceClaimSpec{}
	one.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 1}}}
	claim, nodes := n.schedule("before-restart", one, 1)
	require.NoError(t, c.restartAPIServer())
	published := n.slices(32)
	assert.Equal(t, nodes, n.prepare(claim), "still prepared, same device")
	require.NoError(t, c.client.ResourceV1().ResourceSlices().Delete(ctx, published[0].Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		l, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.name})
		return err == nil && len(l.Items) == 1 && l.Items[0].Name != published[0].Name
	}, 60*time.Second, 200*time.Millisecond, "the deleted slice published again after the restart")
	after, _ := n.schedule("after-restart", one, 1)
	assert.Len(t, n.prepare(after), 1)
}
