package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/podresources/podresourcestest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/rdmans"
)

const (
	bootA = "8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11"
	bootB = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
)

// node is a kubelet's view of one node: its directories, the API server
// (a fake clientset) and the plugin running on it.
type kubeletNode struct {
	t       *testing.T
	dir     string // short: unix socket paths are limited to 108 bytes
	fixture string
	client  *fake.Clientset
	cancel  context.CancelFunc
	done    chan error
	dra     drapb.DRAPluginClient
	conn    *grpc.ClientConn
	rescan  chan struct{}
	live    live.Live
	groups  resources.GroupMode
	// sharing and shares are the plugin's --sharing and --shares.
	sharing resources.SharingMode
	shares  int64
	// pods is the kubelet's PodResources API: the pods it runs.
	pods *podresourcestest.Server
}

func newNode(t *testing.T, fixture string, claims ...*resourceapi.ResourceClaim) *kubeletNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "efa")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	n := &kubeletNode{t: t, dir: dir, fixture: fixture, rescan: make(chan struct{}), live: live.Static{Mode: rdmans.Shared},
		client: fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}}),
		pods:   podresourcestest.Start(t)}
	for _, c := range claims {
		n.addClaim(c)
	}
	n.setBootID(bootA)
	return n
}

// setEFACapacity sets the node's vpc.amazonaws.com/efa capacity, as AWS's
// EFA device plugin does; "" removes it.
func (n *kubeletNode) setEFACapacity(q string) {
	nodeObj, err := n.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(n.t, err)
	nodeObj.Status.Capacity = v1.ResourceList{}
	if q != "" {
		nodeObj.Status.Capacity["vpc.amazonaws.com/efa"] = resource.MustParse(q)
	}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(context.Background(), nodeObj, metav1.UpdateOptions{})
	require.NoError(n.t, err)
}

func (n *kubeletNode) addClaim(c *resourceapi.ResourceClaim) {
	_, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{})
	require.NoError(n.t, err)
}

// TestKubeletStandsAsideForDevicePlugin: on a node whose capacity shows
// AWS's EFA device plugin, the plugin publishes nothing and refuses to
// prepare, saying why; with the device plugin gone it publishes.
func TestKubeletStandsAsideForDevicePlugin(t *testing.T) {
	c := claim("c", "12121212-1212-1212-1212-121212121212", "efa-0000-4f-00-0")
	n := newNode(t, p5, c)
	nodeObj, err := n.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	nodeObj.Status.Capacity = v1.ResourceList{"vpc.amazonaws.com/efa": resource.MustParse("32")}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(context.Background(), nodeObj, metav1.UpdateOptions{})
	require.NoError(t, err)
	n.start()
	defer n.stop()
	r := n.prepare(c)[string(c.UID)]
	assert.Contains(t, r.Error, "vpc.amazonaws.com/efa")
	assert.Contains(t, r.Error, "device plugin")
	time.Sleep(300 * time.Millisecond)
	l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, l.Items, "nothing published beside the device plugin")

	// The device plugin is removed from the node: the next scan publishes.
	nodeObj.Status.Capacity = v1.ResourceList{}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(context.Background(), nodeObj, metav1.UpdateOptions{})
	require.NoError(t, err)
	n.rescan <- struct{}{}
	require.Eventually(t, func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 1
	}, 10*time.Second, 50*time.Millisecond)
	assert.Empty(t, n.prepare(c)[string(c.UID)].Error)

	// The device plugin comes back: the published slices are removed.
	nodeObj, err = n.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	nodeObj.Status.Capacity = v1.ResourceList{"vpc.amazonaws.com/efa": resource.MustParse("32")}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(context.Background(), nodeObj, metav1.UpdateOptions{})
	require.NoError(t, err)
	n.rescan <- struct{}{}
	require.Eventually(t, func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	}, 10*time.Second, 50*time.Millisecond, "slices withdrawn when the device plugin returns")
}

// TestKubeletExclusiveNetns: in the kernel's exclusive RDMA namespace mode
// a pod would not see its EFA, so the plugin publishes nothing and refuses
// to prepare, saying why.
func TestKubeletExclusiveNetns(t *testing.T) {
	c := claim("c", "15151515-1515-1515-1515-151515151515", "efa-0000-4f-00-0")
	n := newNode(t, p5, c)
	n.live = live.Static{Mode: rdmans.Exclusive}
	n.start()
	defer n.stop()
	r := n.prepare(c)[string(c.UID)]
	assert.Contains(t, r.Error, "RDMA namespace mode is exclusive")
	l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, l.Items)
}

func (n *kubeletNode) setBootID(id string) {
	require.NoError(n.t, os.WriteFile(filepath.Join(n.dir, "proc/sys/kernel/random/boot_id"), []byte(id+"\n"), 0o644))
}

func (n *kubeletNode) cdiDir() string { return filepath.Join(n.dir, "cdi") }

// start runs the plugin as the DaemonSet would, then registers it as the
// kubelet does: GetInfo on the registration socket, then
// NotifyRegistrationStatus, then a DRA client on the announced endpoint.
func (n *kubeletNode) start() {
	t := n.t
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() {
		n.done <- driver.Serve(ctx, driver.ServeOptions{
			Config:     resources.Config{NodeName: node, Groups: n.groups, Sharing: n.sharing, Shares: n.shares},
			KubeClient: n.client,
			Paths: driver.Paths{
				PodResourcesSocket: n.pods.Socket,
				SysfsRoot:          n.fixture,
				ProcRoot:           filepath.Join(n.dir, "proc"),
				CDIRoot:            n.cdiDir(),
				RegistrarDir:       filepath.Join(n.dir, "reg"),
				PluginsDir:         filepath.Join(n.dir, "plugins"),
			},
			Ready:  ready,
			Rescan: n.rescan,
			Kernel: driver.Kernel{Live: n.live},
		})
	}()
	select {
	case <-ready:
	case err := <-n.done:
		t.Fatalf("plugin stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("plugin not ready")
	}
	regConn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "reg", "dra.net-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer regConn.Close()
	reg := registerapi.NewRegistrationClient(regConn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, "DRAPlugin", info.Type)
	assert.Equal(t, "dra.net", info.Name)
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	n.conn, err = grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	n.dra = drapb.NewDRAPluginClient(n.conn)
}

func (n *kubeletNode) stop() {
	n.conn.Close()
	n.cancel()
	select {
	case err := <-n.done:
		require.NoError(n.t, err)
	case <-time.After(20 * time.Second):
		n.t.Fatal("plugin did not stop")
	}
}

func ref(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

func (n *kubeletNode) prepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodePrepareResourceResponse {
	var refs []*drapb.Claim
	for _, c := range claims {
		refs = append(refs, ref(c))
	}
	resp, err := n.dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: refs})
	require.NoError(n.t, err)
	return resp.Claims
}

func (n *kubeletNode) unprepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodeUnprepareResourceResponse {
	var refs []*drapb.Claim
	for _, c := range claims {
		refs = append(refs, ref(c))
	}
	resp, err := n.dra.NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{Claims: refs})
	require.NoError(n.t, err)
	return resp.Claims
}

// claim is a ResourceClaim the scheduler allocated the named EFAs to.
func claim(name string, uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "efa", Driver: "dra.net", Pool: node, Device: d})
	}
	return c
}

// specNodes reads a claim's CDI spec from disk, validated by the CDI
// library, and returns its device nodes and environment.
func (n *kubeletNode) specNodes(uid string) (nodes []string, env []string) {
	w, err := cdi.NewWriter(n.cdiDir(), "dra.net")
	require.NoError(n.t, err)
	spec, err := w.Load(uid)
	require.NoError(n.t, err)
	for _, d := range spec.Devices {
		for _, dn := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, fmt.Sprintf("%s %d:%d", dn.Path, dn.Major, dn.Minor))
		}
		env = append(env, d.ContainerEdits.Env...)
	}
	env = append(env, spec.ContainerEdits.Env...)
	sort.Strings(nodes)
	return nodes, env
}

const p5 = "../../testdata/sysfs/p5.48xlarge.sysfs"

func TestKubeletPrepareUnprepare(t *testing.T) {
	c4 := claim("four", "11111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0")
	n := newNode(t, p5, c4)
	n.start()
	defer n.stop()

	// The slices reached the API server, and a rescan with nothing changed
	// writes nothing.
	require.Eventually(t, func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 32
	}, 10*time.Second, 50*time.Millisecond)
	writes := func() int {
		w := 0
		for _, a := range n.client.Actions() {
			if a.GetResource().Resource == "resourceslices" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetVerb() != "get" {
				w++
			}
		}
		return w
	}
	before := writes()
	n.rescan <- struct{}{}
	n.rescan <- struct{}{}
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, before, writes(), "a steady node makes no API writes")

	resp := n.prepare(c4)
	r := resp[string(c4.UID)]
	require.NotNil(t, r)
	require.Empty(t, r.Error)
	require.Len(t, r.Devices, 4)
	ids := map[string]bool{}
	for _, d := range r.Devices {
		assert.Equal(t, node, d.PoolName)
		assert.Equal(t, []string{"efa"}, d.RequestNames)
		// Its own first: the kubelet reports each device's health in the
		// pod's status under its first CDI device ID.
		assert.Equal(t, "dra.net/efa="+string(c4.UID)+"-efa_"+d.DeviceName, d.CdiDeviceIds[0])
		for _, id := range d.CdiDeviceIds {
			ids[id] = true
		}
	}
	// Ours, one per EFA, and the helper's device-metadata spec that mounts
	// which EFAs the container got into it.
	assert.Equal(t, map[string]bool{
		"dra.net/efa=" + string(c4.UID) + "-efa_efa-0000-4f-00-0": true,
		"dra.net/efa=" + string(c4.UID) + "-efa_efa-0000-50-00-0": true,
		"dra.net/efa=" + string(c4.UID) + "-efa_efa-0000-51-00-0": true,
		"dra.net/efa=" + string(c4.UID) + "-efa_efa-0000-52-00-0": true,
		"dra.net/metadata=" + string(c4.UID) + "_efa":             true,
	}, ids)
	meta, err := filepath.Glob(filepath.Join(n.dir, "plugins", "dra.net", "dra-device-metadata", "default_four", "efa", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, meta)
	b, err := os.ReadFile(meta[0])
	require.NoError(t, err)
	assert.Contains(t, string(b), "rdmap79s0", "the container can read which EFAs it got")
	assert.Contains(t, string(b), "uverbs0")
	assert.Contains(t, string(b), "0000:4f:00.0")
	nodes, env := n.specNodes(string(c4.UID))
	assert.Equal(t, []string{
		"/dev/infiniband/uverbs0 231:192", "/dev/infiniband/uverbs1 231:193",
		"/dev/infiniband/uverbs2 231:194", "/dev/infiniband/uverbs3 231:195",
	}, nodes, "exactly the allocated uverbs devices")
	assert.Empty(t, env, "no environment by default: the device nodes are the contract")

	// Prepared again (kubelet retry, or a second pod of a shared claim):
	// the same answer.
	again := n.prepare(c4)[string(c4.UID)]
	assert.Equal(t, r.String(), again.String())

	// Unprepare removes the spec; twice is fine.
	u := n.unprepare(c4)
	assert.Empty(t, u[string(c4.UID)].Error)
	u = n.unprepare(c4)
	assert.Empty(t, u[string(c4.UID)].Error)
	entries, err := os.ReadDir(n.cdiDir())
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), string(c4.UID))
	}
}

func TestKubeletConcurrentAndConflicts(t *testing.T) {
	var claims []*resourceapi.ResourceClaim
	for g := range 8 {
		var devs []string
		for j := range 4 {
			devs = append(devs, fmt.Sprintf("efa-0000-%02x-00-0", []int{0x4f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6}[g]+j))
		}
		claims = append(claims, claim(fmt.Sprintf("gpu%d", g), fmt.Sprintf("%08d-2222-2222-2222-222222222222", g), devs...))
	}
	thief := claim("thief", "33333333-3333-3333-3333-333333333333", "efa-0000-4f-00-0")
	unknown := claim("unknown", "44444444-4444-4444-4444-444444444444", "efa-0000-ff-00-0")
	n := newNode(t, p5, append(claims, thief, unknown)...)
	n.start()
	defer n.stop()

	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := n.prepare(c)[string(c.UID)]
			assert.Empty(t, r.Error, c.Name)
			assert.Len(t, r.Devices, 4, c.Name)
		}()
	}
	wg.Wait()
	r := n.prepare(thief)[string(thief.UID)]
	assert.Contains(t, r.Error, "already prepared for claim "+claims[0].Namespace+"/"+claims[0].Name+" ("+string(claims[0].UID)+")", "one EFA, two workloads: refused")
	r = n.prepare(unknown)[string(unknown.UID)]
	assert.Contains(t, r.Error, "efa-0000-ff-00-0 is not on this node")

	// A shared claim: both pods' prepare calls give the same devices. The
	// kubelet unprepares only after its last pod is gone.
	first := n.prepare(claims[1])[string(claims[1].UID)]
	second := n.prepare(claims[1])[string(claims[1].UID)]
	assert.Equal(t, first.String(), second.String())
}
