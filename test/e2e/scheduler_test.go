package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
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

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/resources"
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
func (c *controlPlane) startControllerManager(extra ...string) error {
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
	// The DaemonSet controller and the root CA publisher (the
	// kube-root-ca.crt ConfigMap a pod's service account token volume
	// needs) run the chart's DaemonSet on the real node; the device taint
	// eviction controller evicts the pods of devices tainted NoExecute.
	args := []string{"--kubeconfig", filepath.Join(c.dir, "admin.kubeconfig"),
		"--leader-elect=false", "--controllers=resourceclaim-controller,daemonset-controller,root-ca-certificate-publisher-controller,device-taint-eviction-controller",
		"--root-ca-file", filepath.Join(c.dir, "certs", "apiserver.crt"), "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port)}
	// EFAKIT_E2E_KCM_RATE=QPS/burst: the controller manager's client rate
	// (its default is 20/30), to tell its share of a burst's start.
	if q, b, ok := strings.Cut(os.Getenv("EFAKIT_E2E_KCM_RATE"), "/"); ok {
		args = append(args, "--kube-api-qps", q, "--kube-api-burst", b)
	}
	return c.start(filepath.Join(bins, "kube-controller-manager"), append(args, extra...)...)
}

// startScheduler runs the real kube-scheduler against the control plane,
// with more flags where given; c.scheduler is its secure address.
func (c *controlPlane) startScheduler(extra ...string) error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins, "kube-scheduler"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.dir, "admin.kubeconfig")
	port, err := freePort()
	if err != nil {
		return err
	}
	c.scheduler = fmt.Sprintf("https://127.0.0.1:%d", port)
	return c.start(filepath.Join(bins, "kube-scheduler"), append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port),
		// Its /metrics and /debug/pprof take the admin token: the scheduler
		// asks the API server who holds it (a TokenReview) and whether they
		// may (a SubjectAccessReview), else it serves them to no one.
		"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig}, extra...)...)
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
	mode    resources.GroupMode
	dir     string
	topo    *topology.Topology
	gpuRoot map[string]string // GPU device -> pcieRoot
	efaRoot map[string]string // published device -> pcieRoot
	proc    *exec.Cmd
	http    string // the plugin's /healthz, /readyz, /metrics
	dra     drapb.DRAPluginClient
	conns   []*grpc.ClientConn
	cdi     *cdi.Writer
	bin     string   // the plugin binary; pluginBinary() when ""
	args    []string // more flags for the plugin
}

// newE2ENode makes the node and starts its plugin; opts change the node
// before the plugin starts.
func newE2ENode(t *testing.T, c *controlPlane, name, fixture string, mode resources.GroupMode, opts ...func(*e2eNode)) *e2eNode {
	t.Helper()
	ctx := context.Background()
	n := &e2eNode{t: t, c: c, name: name, fixture: fixture, mode: mode, gpuRoot: map[string]string{}, efaRoot: map[string]string{}}
	for _, o := range opts {
		o(n)
	}
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
	n.topo = scanFixture(t, fixture)
	for _, dc := range append(resources.DeviceClasses(resources.ClassOptions{}), accelClass(resources.GPUDeviceClass)) {
		_, err := c.client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		require.NoError(t, createIgnoreExists(err))
	}
	gpus := gpuDevices(n.topo)
	for _, d := range gpus {
		n.gpuRoot[d.Name] = *d.Attributes[resources.AttrPCIeRoot].StringValue
	}
	nodeName := name
	_, err = c.client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpus-" + name},
		Spec: resourceapi.ResourceSliceSpec{Driver: resources.GPUDeviceClass, NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: gpus}}, metav1.CreateOptions{})
	require.NoError(t, err)

	if neurons := neuronDevices(n.topo); len(neurons) > 0 {
		_, err := c.client.ResourceV1().DeviceClasses().Create(ctx, accelClass(resources.NeuronDeviceClass), metav1.CreateOptions{})
		require.NoError(t, createIgnoreExists(err))
		_, err = c.client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "neurons-" + name},
			Spec: resourceapi.ResourceSliceSpec{Driver: resources.NeuronDeviceClass, NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: neurons}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

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

// scanFixture is the topology of a fixture, as efakit reads it.
func scanFixture(t *testing.T, fixture string) *topology.Topology {
	t.Helper()
	root, err := sysfs.Open(fixture)
	require.NoError(t, err)
	defer root.Close()
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	return topo
}

// gpuDevices are a topology's GPUs as NVIDIA's DRA driver publishes them:
// resource.kubernetes.io/pcieRoot and pciBusID, and its type.
func gpuDevices(topo *topology.Topology) []resourceapi.Device {
	var out []resourceapi.Device
	for _, g := range topo.Of(topology.KindGPU) {
		s, _ := topo.StandardAttributes(g)
		root, bus, typ := s.PCIeRoot, s.PCIBusID, "gpu"
		out = append(out, resourceapi.Device{Name: strings.ToLower(g.Name), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resources.AttrPCIeRoot: {StringValue: &root}, resources.AttrPCIBusID: {StringValue: &bus}, "type": {StringValue: &typ}}})
	}
	return out
}

// neuronDevices are a topology's Neuron devices as the Neuron DRA driver
// publishes them: their device groups.
func neuronDevices(topo *topology.Topology) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range topo.Of(topology.KindNeuron) {
		if d.Groups == nil {
			continue
		}
		g := *d.Groups
		out = append(out, resourceapi.Device{Name: fmt.Sprintf("neuron-%d", d.NeuronIndex), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resources.AttrGroup1: {StringValue: &g.Group1}, resources.AttrGroup4: {StringValue: &g.Group4},
			resources.AttrGroup8: {StringValue: &g.Group8}, resources.AttrGroup16: {StringValue: &g.Group16}}})
	}
	return out
}

// accelClass is the DeviceClass of an accelerator driver: NVIDIA's selects
// its GPUs, the Neuron driver's every device it publishes.
func accelClass(drv string) *resourceapi.DeviceClass {
	expr := fmt.Sprintf("device.driver == %q", drv)
	if drv == resources.GPUDeviceClass {
		expr = `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`
	}
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: drv},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
}

var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// pluginBinary builds plugin/cmd/efakit-plugin once for the test binary.
func pluginBinary() (string, error) {
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "efakit-plugin-bin")
		if err != nil {
			pluginErr = err
			return
		}
		pluginBin = filepath.Join(dir, "efakit-plugin")
		// As the image builds it (static, -trimpath, -s -w): what runs
		// on a node, and the image's build reuses what it compiled.
		// In the plugin module, with its own requirements, as the image.
		b := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", pluginBin, "./cmd/efakit-plugin")
		b.Dir = "../../plugin"
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("go build efakit-plugin: %v\n%s", err, out)
			return
		}
		// Written back now: a test that measures the plugin's memory
		// would otherwise see the just-linked file's dirty pages, which
		// the kernel cannot drop (on a node the binary comes from an
		// image layer written long before).
		f, err := os.Open(pluginBin)
		if err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
		pluginErr = err
	})
	return pluginBin, pluginErr
}

// start runs the efakit-plugin binary with the flags the DaemonSet gives
// it (and a kubeconfig), then registers it as the kubelet does and waits
// for its /readyz.
func (n *e2eNode) start() {
	t := n.t
	bin := n.bin
	if bin == "" {
		var err error
		bin, err = pluginBinary()
		require.NoError(t, err)
	}
	port, err := freePort()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"--node-name", n.name, "--kubeconfig", filepath.Join(n.c.dir, "admin.kubeconfig"),
		"--sysfs", n.fixture, "--proc", filepath.Join(n.dir, "proc"), "--cdi-root", filepath.Join(n.dir, "cdi"),
		"--kubelet-registrar-directory-path", filepath.Join(n.dir, "reg"), "--kubelet-plugins-directory-path", filepath.Join(n.dir, "plugins"),
		"--groups", modeFlag(n.mode), "--http-address", fmt.Sprintf("127.0.0.1:%d", port), "-v", "2"}, n.args...)...)
	log, err := os.OpenFile(filepath.Join(n.dir, "plugin.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	n.proc = cmd
	n.http = fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx := context.Background()
	sock := filepath.Join(n.dir, "reg", "dra.net-reg.sock")
	require.Eventually(t, func() bool { _, err := os.Stat(sock); return err == nil }, 60*time.Second, 50*time.Millisecond,
		"the plugin's registration socket; log:\n%s", n.log())
	regConn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	reg := registerapi.NewRegistrationClient(regConn)
	// A socket left by a killed plugin is there before the new one
	// listens: ask until the plugin answers, as the kubelet does.
	var info *registerapi.PluginInfo
	eventually(t, func() bool {
		info, err = reg.GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil
	}, 60*time.Second, 100*time.Millisecond, func() string { return fmt.Sprintf("GetInfo; log:\n%s", n.log()) })
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	draConn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	n.conns = []*grpc.ClientConn{regConn, draConn}
	n.dra = drapb.NewDRAPluginClient(draConn)
	require.Eventually(t, func() bool { return httpOK(n.http + "/readyz") }, 30*time.Second, 100*time.Millisecond, "/readyz after registration")
}

// httpOK tells whether a GET of url answers 200.
func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func modeFlag(m resources.GroupMode) string {
	if m == resources.GroupsNone {
		return "none"
	}
	return string(m)
}

func (n *e2eNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "plugin.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// rescanNow asks the plugin to scan sysfs now, as an operator would.
func (n *e2eNode) rescanNow() { require.NoError(n.t, n.proc.Process.Signal(syscall.SIGHUP)) }

// stop sends SIGTERM, as the kubelet does to a pod, and expects a clean exit.
func (n *e2eNode) stop() {
	if n.proc == nil {
		return
	}
	for _, c := range n.conns {
		c.Close()
	}
	require.NoError(n.t, n.proc.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- n.proc.Wait() }()
	select {
	case err := <-done:
		require.NoError(n.t, err, "clean exit on SIGTERM; log:\n%s", n.log())
	case <-time.After(20 * time.Second):
		_ = n.proc.Process.Kill()
		n.t.Fatal("plugin did not stop on SIGTERM")
	}
	n.proc = nil
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
				n.efaRoot[d.Name] = *d.Attributes[resources.AttrPCIeRoot].StringValue
				got++
			}
		}
		out = l.Items
		return got == devices
	}, 30*time.Second, 100*time.Millisecond, "%s: the plugin's %d devices on the API server", n.name, devices)
	return out
}

// pod creates a pod on this node that uses one claim.
func (n *e2eNode) pod(name string, claim corev1.PodResourceClaim) {
	n.t.Helper()
	_, err := n.c.client.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": n.name},
			ResourceClaims: []corev1.PodResourceClaim{claim},
			Containers: []corev1.Container{{Name: "app", Image: "app",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(n.t, err)
}

// fromTemplate creates the template and pods pods that each name it, waits
// until the controller manager made their claims and the scheduler
// allocated them and bound the pods, and returns the claims, in pod order.
func (n *e2eNode) fromTemplate(tmpl *resourceapi.ResourceClaimTemplate, pods int) []*resourceapi.ResourceClaim {
	t, ctx, c := n.t, context.Background(), n.c
	t.Helper()
	tmpl.Namespace = "default"
	_, err := c.client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range pods {
		tn := tmpl.Name
		n.pod(fmt.Sprintf("%s-%d", tmpl.Name, i), corev1.PodResourceClaim{Name: "c", ResourceClaimTemplateName: &tn})
	}
	var claims []*resourceapi.ResourceClaim
	for i := range pods {
		var claim *resourceapi.ResourceClaim
		require.Eventually(t, func() bool {
			p, err := c.client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s-%d", tmpl.Name, i), metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != n.name || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				return false
			}
			claim, err = c.client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			return err == nil && claim.Status.Allocation != nil
		}, 60*time.Second, 200*time.Millisecond, "pod %s-%d: claim from the template, allocated, bound", tmpl.Name, i)
		claims = append(claims, claim)
	}
	return claims
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
		n.pod(fmt.Sprintf("%s-%d", name, i), corev1.PodResourceClaim{Name: "c", ResourceClaimName: &cn})
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

func template(t *testing.T, tms []resources.Template, name string) *resourceapi.ResourceClaimTemplate {
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
	n := newE2ENode(t, c, "p5-node", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone)
	published := n.slices(32)

	// A steady node makes no API writes: two rescans later, the slice is
	// the same object.
	n.rescanNow()
	n.rescanNow()
	time.Sleep(500 * time.Millisecond)
	again := n.slices(32)
	assert.Equal(t, published[0].ResourceVersion, again[0].ResourceVersion, "a rescan that finds nothing new writes nothing")

	// The users' aligned-efa-nvidia: the EFA shares the GPU's root.
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "aligned-efa-nvidia")), &tmpl))
	pair, pairNodes := n.schedule("pair", tmpl.Spec.Spec, 1)
	reqs := byReq(pair)
	require.Len(t, reqs["1-efa"], 1)
	assert.Equal(t, n.gpuRoot[reqs["1-gpu"][0]], n.efaRoot[reqs["1-efa"][0]], "EFA and GPU on one PCIe root")
	assert.Len(t, pairNodes, 1, "exactly the allocated uverbs device")

	// The users' shared-efa, one claim shared by two pods: both bound, the
	// same four EFAs.
	var shared resourceapi.ResourceClaim
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "shared-efa")), &shared))
	claim, nodes := n.schedule("shared", shared.Spec, 2)
	assert.Len(t, claim.Status.ReservedFor, 2, "reserved for both pods")
	assert.Len(t, nodes, 4)

	// efakit's "GPU with its EFAs" for the GPUs left: each claim gets the
	// four EFAs behind its GPU's switch. The scheduler fills first, so the
	// pair and the shared claim used the first two roots.
	tms, _ := resources.ClaimTemplates(n.topo, resources.GroupsNone, "")
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

	// The plugin's metrics counted the prepares.
	resp, err := http.Get(n.http + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `efakit_plugin_calls_total{op="prepare",result="ok"}`)
	assert.Contains(t, string(body), "efakit_plugin_devices 32")

	// A deleted ResourceSlice comes back.
	require.NoError(t, c.client.ResourceV1().ResourceSlices().Delete(ctx, published[0].Name, metav1.DeleteOptions{}))
	n.slices(32)

	// A plugin restart, and a CDI directory wiped while the claims stay
	// prepared: the specs are written again, and the claims are still held.
	n.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(n.dir, "cdi")))
	n.start()
	_, err = n.cdi.Load(string(pair.UID))
	require.NoError(t, err, "the pair's CDI spec is back after the restart, before any call")
	assert.Equal(t, pairNodes, n.prepare(pair), "the same device, prepared again after the restart")
	un, err := n.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: pair.Name, Uid: string(pair.UID)}}})
	require.NoError(t, err)
	assert.Empty(t, un.Claims[string(pair.UID)].Error)
	_, err = n.cdi.Load(string(pair.UID))
	assert.ErrorIs(t, err, os.ErrNotExist, "unprepared: its spec is gone")
}

// TestSchedulerTemplates: pods that name a ResourceClaimTemplate (the
// users' aligned-efa-nvidia, one claim per pod) get their claims from the
// real controller manager, the scheduler pairs each, and each prepares.
func TestSchedulerTemplates(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	n := newE2ENode(t, c, "p4d-node", "../../testdata/sysfs/p4d.24xlarge.sysfs", resources.GroupsNone)
	n.slices(4)
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "aligned-efa-nvidia")), &tmpl))
	tmpl.Name = "p4d-aligned-efa-nvidia"
	roots := map[string]bool{}
	// p4d has four roots, each with one EFA: four pods fit.
	for _, claim := range n.fromTemplate(&tmpl, 4) {
		reqs := byReq(claim)
		assert.Equal(t, n.gpuRoot[reqs["1-gpu"][0]], n.efaRoot[reqs["1-efa"][0]])
		roots[n.efaRoot[reqs["1-efa"][0]]] = true
		assert.Len(t, n.prepare(claim), 1)
	}
	assert.Len(t, roots, 4, "one pod per root")
}

// TestSchedulerNeuron: the users' aligned-efa-neuron template (four Neuron
// devices and four EFAs of one devicegroup4_id) through the controller
// manager and the scheduler on a trn2 node: each claim's EFAs are exactly
// those of its Neuron devices.
func TestSchedulerNeuron(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	n := newE2ENode(t, c, "trn2-node", "../../testdata/sysfs/trn2.48xlarge.sysfs", resources.GroupsNone)
	published := n.slices(16)
	efaAddr := map[string]string{}
	for _, s := range published {
		for _, d := range s.Spec.Devices {
			efaAddr[d.Name] = *d.Attributes[resources.AttrPCIBusID].StringValue
		}
	}
	neuronEFA := map[string]string{}
	for _, d := range n.topo.Of(topology.KindNeuron) {
		neuronEFA[fmt.Sprintf("neuron-%d", d.NeuronIndex)] = d.Groups.Group1
	}
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims-neuron.yaml", "aligned-efa-neuron")), &tmpl))
	// 16 Neuron devices, four groups of four.
	for _, claim := range n.fromTemplate(&tmpl, 4) {
		reqs := byReq(claim)
		var want, got []string
		for _, nd := range reqs["4-neurons"] {
			want = append(want, neuronEFA[nd])
		}
		for _, e := range reqs["4-efas"] {
			got = append(got, efaAddr[e])
		}
		sort.Strings(want)
		sort.Strings(got)
		assert.Equal(t, want, got, "the four EFAs of the four Neuron devices")
		assert.Len(t, n.prepare(claim), 4)
	}
}

// TestSchedulerGroupModes: the "GPUs with their EFA group" template through
// the real scheduler on p5en nodes publishing groups, exclusive and mixed;
// a group prepares as every EFA of its root.
func TestSchedulerGroupModes(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
		t.Run(string(mode), func(t *testing.T) {
			n := newE2ENode(t, c, "p5en-"+string(mode), "../../testdata/sysfs/p5en.48xlarge.sysfs", mode)
			devices := 4 // four roots, one group each
			if mode == resources.GroupsMixed {
				devices += 16
			}
			n.slices(devices)
			tms, _ := resources.ClaimTemplates(n.topo, mode, "")
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

// claimDoc is the YAML document of the users' claims that defines name.
func claimDoc(t *testing.T, file, name string) string {
	t.Helper()
	for _, doc := range splitDocs(readClaimsFile(t, file)) {
		if strings.Contains(doc, "name: "+name+"\n") {
			return doc
		}
	}
	t.Fatalf("no %s in %s", name, file)
	return ""
}

func readClaimsFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile("../../testdata/claims/" + file)
	require.NoError(t, err, "the users' claims")
	return string(b)
}

// TestAPIServerRestart: the API server goes away and comes back; the
// plugin's slices and prepared claims survive, and a slice deleted
// afterwards is published again (the plugin's watch reconnected).
func TestAPIServerRestart(t *testing.T) {
	c := apiServer(t)
	require.NoError(t, c.startSchedulerOnce())
	ctx := context.Background()
	n := newE2ENode(t, c, "p5-restart", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone)
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
