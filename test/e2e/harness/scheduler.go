package harness

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

var schedOnce sync.Once

var schedErr error

// StartSchedulerOnce starts kube-scheduler and kube-controller-manager (for
// ResourceClaims made from templates) for the test binary.
func (c *ControlPlane) StartSchedulerOnce() error {
	schedOnce.Do(func() {
		if schedErr = c.StartScheduler(); schedErr == nil {
			schedErr = c.StartControllerManager()
		}
	})
	return schedErr
}

// StartControllerManager runs kube-controller-manager with the resource
// claim controller, which turns a pod's ResourceClaimTemplate into its
// ResourceClaim.
func (c *ControlPlane) StartControllerManager(extra ...string) error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins, "kube-controller-manager"); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	// The DaemonSet controller and the root CA publisher (the
	// kube-root-ca.crt ConfigMap a pod's service account token volume
	// needs) run the chart's DaemonSet on the real node; the device taint
	// eviction controller evicts the pods of devices tainted NoExecute.
	args := []string{"--kubeconfig", filepath.Join(c.Dir, "admin.kubeconfig"),
		"--leader-elect=false", "--controllers=resourceclaim-controller,daemonset-controller,root-ca-certificate-publisher-controller,device-taint-eviction-controller",
		"--root-ca-file", filepath.Join(c.Dir, "certs", "apiserver.crt"), "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port)}
	// EFAKIT_E2E_KCM_RATE=QPS/burst: the controller manager's client rate
	// (its default is 20/30), to tell its share of a burst's start.
	if q, b, ok := strings.Cut(os.Getenv("EFAKIT_E2E_KCM_RATE"), "/"); ok {
		args = append(args, "--kube-api-qps", q, "--kube-api-burst", b)
	}
	return c.start(filepath.Join(bins, "kube-controller-manager"), append(args, extra...)...)
}

// StartScheduler runs the real kube-scheduler against the control plane,
// with more flags where given; c.scheduler is its secure address.
func (c *ControlPlane) StartScheduler(extra ...string) error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins, "kube-scheduler"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dir, "admin.kubeconfig")
	port, err := FreePort()
	if err != nil {
		return err
	}
	c.Scheduler = fmt.Sprintf("https://127.0.0.1:%d", port)
	return c.start(filepath.Join(bins, "kube-scheduler"), append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port),
		// Its /metrics and /debug/pprof take the admin token: the scheduler
		// asks the API server who holds it (a TokenReview) and whether they
		// may (a SubjectAccessReview), else it serves them to no one.
		"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig}, extra...)...)
}

// CreateIgnoreExists is a create's error, nil where the object exists.
func CreateIgnoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// E2ENode is one node of the e2e cluster: its Node object, NVIDIA-shaped
// GPU slices, and efakit's plugin running on a fixture with a kubelet
// stand-in registered over the plugin's sockets.
type E2ENode struct {
	T       *testing.T
	c       *ControlPlane
	Name    string
	fixture string
	mode    resources.GroupMode
	Dir     string
	Topo    *topology.Topology
	GPURoot map[string]string // GPU device -> pcieRoot
	EFARoot map[string]string // published device -> pcieRoot
	Proc    *exec.Cmd
	HTTP    string // the plugin's /healthz, /readyz, /metrics
	DRA     drapb.DRAPluginClient
	Conns   []*grpc.ClientConn
	CDI     *cdi.Writer
	Bin     string   // the plugin binary; PluginBinary() when ""
	Args    []string // more flags for the plugin
}

// NewE2ENode makes the node and starts its plugin; opts change the node
// before the plugin starts.
func NewE2ENode(t *testing.T, c *ControlPlane, name, fixture string, mode resources.GroupMode, opts ...func(*E2ENode)) *E2ENode {
	t.Helper()
	ctx := context.Background()
	n := &E2ENode{T: t, c: c, Name: name, fixture: fixture, mode: mode, GPURoot: map[string]string{}, EFARoot: map[string]string{}}
	for _, o := range opts {
		o(n)
	}
	// No controller manager: the service account a pod needs by default.
	_, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, CreateIgnoreExists(err))

	// The node, ready and schedulable, as a kubelet would register it.
	node, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	node.Status.Capacity = corev1.ResourceList{"cpu": resource.MustParse("192"), "memory": resource.MustParse("2Ti"), "pods": resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	node, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	// The API server taints a new node not-ready; no node lifecycle
	// controller runs here to lift it once it is Ready.
	node.Spec.Taints = nil
	_, err = c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Classes: efakit's and NVIDIA's; and GPU slices shaped like NVIDIA's
	// driver's for the same machine.
	n.Topo = ScanFixture(t, fixture)
	for _, dc := range append(resources.DeviceClasses(resources.ClassOptions{}), AccelClass(resources.GPUDeviceClass)) {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		require.NoError(t, CreateIgnoreExists(err))
	}
	gpus := gpuDevices(n.Topo)
	for _, d := range gpus {
		n.GPURoot[d.Name] = *d.Attributes[resources.AttrPCIeRoot].StringValue
	}
	nodeName := name
	_, err = c.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpus-" + name},
		Spec: resourceapi.ResourceSliceSpec{Driver: resources.GPUDeviceClass, NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: gpus}}, metav1.CreateOptions{})
	require.NoError(t, err)

	if neurons := NeuronDevices(n.Topo); len(neurons) > 0 {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, AccelClass(resources.NeuronDeviceClass), metav1.CreateOptions{})
		require.NoError(t, CreateIgnoreExists(err))
		_, err = c.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "neurons-" + name},
			Spec: resourceapi.ResourceSliceSpec{Driver: resources.NeuronDeviceClass, NodeName: &nodeName, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: neurons}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	n.Dir, err = os.MkdirTemp("", "efa")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(n.Dir) })
	for _, d := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
		require.NoError(t, os.MkdirAll(filepath.Join(n.Dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(n.Dir, "proc/sys/kernel/random/boot_id"), []byte("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11\n"), 0o644))
	n.CDI, err = cdi.NewWriter(filepath.Join(n.Dir, "cdi"), "dra.net")
	require.NoError(t, err)
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// ScanFixture is the topology of a fixture, as efakit reads it.
func ScanFixture(t *testing.T, fixture string) *topology.Topology {
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

// NeuronDevices are a topology's Neuron devices as the Neuron DRA driver
// publishes them: their device groups.
func NeuronDevices(topo *topology.Topology) []resourceapi.Device {
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

// AccelClass is the DeviceClass of an accelerator driver: NVIDIA's selects
// its GPUs, the Neuron driver's every device it publishes.
func AccelClass(drv string) *resourceapi.DeviceClass {
	expr := fmt.Sprintf("device.driver == %q", drv)
	if drv == resources.GPUDeviceClass {
		expr = `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`
	}
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: drv},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
}

// PluginBinary builds plugin/cmd/efakit-plugin once for the test binary.
func PluginBinary() (string, error) { return PluginCommand("./cmd/efakit-plugin") }

// CLIBinary builds plugin/cmd/efakit once for the test binary.
func CLIBinary() (string, error) { return PluginCommand("./cmd/efakit") }

// commands holds the plugin module's commands built so far, by package.
var commands sync.Map // string -> *command

type command struct {
	once sync.Once
	path string
	err  error
}

// PluginCommand builds a main package of the plugin module (pkg, such as
// "./cmd/efakit") once for the test binary and returns the binary's path,
// named after the package's directory. It builds as the image does
// (static, -trimpath, -s -w): what runs on a node, and the image's build
// reuses what it compiled; in the plugin module, with its own
// requirements.
func PluginCommand(pkg string) (string, error) {
	v, _ := commands.LoadOrStore(pkg, &command{})
	c := v.(*command)
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", "efakit-bin")
		if err != nil {
			c.err = err
			return
		}
		c.path = filepath.Join(dir, filepath.Base(pkg))
		b := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", c.path, pkg)
		b.Dir = filepath.Join(Root, "plugin")
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			c.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		// Written back now: a test that measures the plugin's memory
		// would otherwise see the just-linked file's dirty pages, which
		// the kernel cannot drop (on a node the binary comes from an
		// image layer written long before).
		f, err := os.Open(c.path)
		if err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
		c.err = err
	})
	return c.path, c.err
}

// Start runs the efakit-plugin binary with the flags the DaemonSet gives
// it (and a kubeconfig), then registers it as the kubelet does and waits
// for its /readyz.
func (n *E2ENode) Start() {
	t := n.T
	bin := n.Bin
	if bin == "" {
		var err error
		bin, err = PluginBinary()
		require.NoError(t, err)
	}
	port, err := FreePort()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"--node-name", n.Name, "--kubeconfig", filepath.Join(n.c.Dir, "admin.kubeconfig"),
		"--sysfs", n.fixture, "--proc", filepath.Join(n.Dir, "proc"), "--cdi-root", filepath.Join(n.Dir, "cdi"),
		"--kubelet-registrar-directory-path", filepath.Join(n.Dir, "reg"), "--kubelet-plugins-directory-path", filepath.Join(n.Dir, "plugins"),
		"--groups", ModeFlag(n.mode), "--http-address", fmt.Sprintf("127.0.0.1:%d", port), "-v", "2"}, n.Args...)...)
	log, err := os.OpenFile(filepath.Join(n.Dir, "plugin.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	n.Proc = cmd
	n.HTTP = fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx := context.Background()
	sock := filepath.Join(n.Dir, "reg", "dra.net-reg.sock")
	require.Eventually(t, func() bool { _, err := os.Stat(sock); return err == nil }, 60*time.Second, 50*time.Millisecond,
		"the plugin's registration socket; log:\n%s", n.Log())
	regConn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	reg := registerapi.NewRegistrationClient(regConn)
	// A socket left by a killed plugin is there before the new one
	// listens: ask until the plugin answers, as the kubelet does.
	var info *registerapi.PluginInfo
	Eventually(t, func() bool {
		info, err = reg.GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil
	}, 60*time.Second, 100*time.Millisecond, func() string { return fmt.Sprintf("GetInfo; log:\n%s", n.Log()) })
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	draConn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	n.Conns = []*grpc.ClientConn{regConn, draConn}
	n.DRA = drapb.NewDRAPluginClient(draConn)
	require.Eventually(t, func() bool { return httpOK(n.HTTP + "/readyz") }, 30*time.Second, 100*time.Millisecond, "/readyz after registration")
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

// ModeFlag is the plugin's --groups value of a group mode.
func ModeFlag(m resources.GroupMode) string {
	if m == resources.GroupsNone {
		return "none"
	}
	return string(m)
}

// Log is the end of the plugin's log.
func (n *E2ENode) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "plugin.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// RescanNow asks the plugin to scan sysfs now, as an operator would.
func (n *E2ENode) RescanNow() { require.NoError(n.T, n.Proc.Process.Signal(syscall.SIGHUP)) }

// Stop sends SIGTERM, as the kubelet does to a pod, and expects a clean exit.
func (n *E2ENode) Stop() {
	if n.Proc == nil {
		return
	}
	for _, c := range n.Conns {
		c.Close()
	}
	require.NoError(n.T, n.Proc.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- n.Proc.Wait() }()
	select {
	case err := <-done:
		require.NoError(n.T, err, "clean exit on SIGTERM; log:\n%s", n.Log())
	case <-time.After(20 * time.Second):
		_ = n.Proc.Process.Kill()
		n.T.Fatal("plugin did not stop on SIGTERM")
	}
	n.Proc = nil
}

// Slices waits for the plugin's slices of the node on the API server and
// returns them, noting each device's root.
func (n *E2ENode) Slices(devices int) []resourceapi.ResourceSlice {
	n.T.Helper()
	var out []resourceapi.ResourceSlice
	require.Eventually(n.T, func() bool {
		l, err := n.c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name})
		if err != nil {
			return false
		}
		got := 0
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				n.EFARoot[d.Name] = *d.Attributes[resources.AttrPCIeRoot].StringValue
				got++
			}
		}
		out = l.Items
		return got == devices
	}, 30*time.Second, 100*time.Millisecond, "%s: the plugin's %d devices on the API server", n.Name, devices)
	return out
}

// Pod creates a pod on this node that uses one claim.
func (n *E2ENode) Pod(name string, claim corev1.PodResourceClaim) {
	n.T.Helper()
	_, err := n.c.Client.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": n.Name},
			ResourceClaims: []corev1.PodResourceClaim{claim},
			Containers: []corev1.Container{{Name: "app", Image: "app",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(n.T, err)
}

// FromTemplate creates the template and pods pods that each name it, waits
// until the controller manager made their claims and the scheduler
// allocated them and bound the pods, and returns the claims, in pod order.
func (n *E2ENode) FromTemplate(tmpl *resourceapi.ResourceClaimTemplate, pods int) []*resourceapi.ResourceClaim {
	t, ctx, c := n.T, context.Background(), n.c
	t.Helper()
	tmpl.Namespace = "default"
	_, err := c.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range pods {
		tn := tmpl.Name
		n.Pod(fmt.Sprintf("%s-%d", tmpl.Name, i), corev1.PodResourceClaim{Name: "c", ResourceClaimTemplateName: &tn})
	}
	var claims []*resourceapi.ResourceClaim
	for i := range pods {
		var claim *resourceapi.ResourceClaim
		require.Eventually(t, func() bool {
			p, err := c.Client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s-%d", tmpl.Name, i), metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != n.Name || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				return false
			}
			claim, err = c.Client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			return err == nil && claim.Status.Allocation != nil
		}, 60*time.Second, 200*time.Millisecond, "pod %s-%d: claim from the template, allocated, bound", tmpl.Name, i)
		claims = append(claims, claim)
	}
	return claims
}

// Schedule creates a claim from spec and pods using it on this node, waits
// until the real scheduler allocated it and bound them, and prepares it as
// the kubelet would, once for the node. It returns the claim and the uverbs
// nodes of its CDI spec.
func (n *E2ENode) Schedule(name string, spec resourceapi.ResourceClaimSpec, pods int) (*resourceapi.ResourceClaim, []string) {
	t, ctx, c := n.T, context.Background(), n.c
	t.Helper()
	claim, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range pods {
		cn := name
		n.Pod(fmt.Sprintf("%s-%d", name, i), corev1.PodResourceClaim{Name: "c", ResourceClaimName: &cn})
	}
	scheduled := func() bool {
		for i := range pods {
			p, err := c.Client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != n.Name {
				return false
			}
		}
		claim, err = c.Client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && claim.Status.Allocation != nil
	}
	for deadline := time.Now().Add(60 * time.Second); !scheduled(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			p, _ := c.Client.CoreV1().Pods("default").Get(ctx, name+"-0", metav1.GetOptions{})
			t.Fatalf("%s: not scheduled: pod status %+v\nscheduler log:\n%s", name, p.Status, c.LogTail("kube-scheduler", 3000))
		}
	}
	return claim, n.Prepare(claim)
}

// Prepare calls NodePrepareResources for a claim as the kubelet does and
// returns the uverbs nodes of the CDI spec the plugin wrote.
func (n *E2ENode) Prepare(claim *resourceapi.ResourceClaim) []string {
	t := n.T
	t.Helper()
	resp, err := n.DRA.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	require.NoError(t, err)
	r := resp.Claims[string(claim.UID)]
	require.NotNil(t, r)
	require.Empty(t, r.Error, claim.Name)
	spec, err := n.CDI.Load(string(claim.UID))
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

// ReadClaimsFile is a file of the users' claims in testdata/claims.
func ReadClaimsFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root, "testdata", "claims", file))
	require.NoError(t, err, "the users' claims")
	return string(b)
}
