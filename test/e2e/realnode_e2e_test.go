package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

const (
	p5Fixture   = "../../testdata/sysfs/p5.48xlarge.sysfs"
	trn2Fixture = "../../testdata/sysfs/trn2.48xlarge.sysfs"
)

// check compares what a container printed with its claims' allocation:
// exactly the allocated EFAs' uverbs nodes with their device numbers, one
// variable per allocated accelerator (the stand-in's CDI devices), no
// libfabric variable unless wantEnv names it, and metadata naming exactly
// the allocated EFAs.
func (n *realNode) check(t *testing.T, got seen, nodes efaNodes, claims []*resourceapi.ResourceClaim, wantEnv map[string]string) {
	t.Helper()
	assert.Equal(t, n.expect(t, nodes, claims...), got.Nodes, "the container holds exactly the allocated EFAs' uverbs nodes:\n%s", got.Raw)
	var wantAccel, gotAccel []string
	for _, d := range append(allocated("gpu.nvidia.com", claims...), allocated("neuron.aws.com", claims...)...) {
		wantAccel = append(wantAccel, harness.AccelEnv(d))
	}
	for k := range got.Env {
		if strings.HasPrefix(k, "E2E_") {
			gotAccel = append(gotAccel, k)
		}
	}
	sort.Strings(wantAccel)
	sort.Strings(gotAccel)
	assert.Equal(t, wantAccel, gotAccel, "the accelerators' CDI devices")
	for k, v := range got.Env {
		if strings.HasPrefix(k, "FI_") {
			assert.Equal(t, wantEnv[k], v, "%s", k)
		}
	}
	for k, v := range wantEnv {
		assert.Equal(t, v, got.Env[k], "%s", k)
	}
	var meta []string
	for file, content := range got.Metadata {
		if strings.HasSuffix(file, "/dra.net-metadata.json") {
			meta = append(meta, metadataDevices(t, content)...)
		}
	}
	sort.Strings(meta)
	assert.Equal(t, allocated(resources.DefaultDriverName, claims...), meta, "the device metadata names the allocated EFAs")
}

// containerID is the runtime's ID of a pod's container.
func (n *realNode) containerID(t *testing.T, pod string) (string, int32) {
	p, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(context.Background(), pod, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, p.Status.ContainerStatuses, 1)
	s := p.Status.ContainerStatuses[0]
	return strings.TrimPrefix(s.ContainerID, "containerd://"), s.RestartCount
}

// killContainer kills a container's process, as an OOM kill or a crash
// would; the kubelet starts it again.
func (n *realNode) killContainer(t *testing.T, id string) {
	out, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// waitRestarted waits until the kubelet has started the pod's container
// again, more than restarts times in all.
func (n *realNode) waitRestarted(t *testing.T, pod string, restarts int32) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, r := n.containerID(t, pod)
		return r > restarts
	}, 90*time.Second, 200*time.Millisecond, "the container of %s restarted", pod)
}

// wipeCDI removes every file of the CDI directory, as an operator's rm or
// a tmpfs at reboot does.
func (n *realNode) wipeCDI(t *testing.T) {
	entries, err := os.ReadDir(n.CDI)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.RemoveAll(filepath.Join(n.CDI, e.Name())))
	}
}

func TestRealNodeP5(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := startRealNode(t, c)
	n.EnsureNamespace()
	gpus := n.StartAccelDriver(p5Fixture)
	require.Len(t, gpus, 8)
	n.StartEFAKit(p5Fixture)
	n.WaitEFAs(t, 32)
	nodes := fixtureNodes(t, p5Fixture)
	harness.CreateSeed(t, c, "seed-claims.yaml")
	published := n.PublishedEFAs(t)
	rootOf := func(dev string) string {
		if d, ok := published[dev]; ok {
			return *d.Attributes[resources.AttrPCIeRoot].StringValue
		}
		return *gpus[dev].Attributes[resources.AttrPCIeRoot].StringValue
	}

	t.Run("users/single-efa-claim", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("single", harness.TemplateClaim("efa", "single-efa-claim")))
		require.Len(t, got.Nodes, 1)
		// The device cgroup lets the container open its node; no EFA
		// driver answers behind it on this machine.
		assert.Contains(t, got.Open, "No such device or address", "opening the uverbs node")
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "single")
	})
	t.Run("metrics/claim-labels", func(t *testing.T) { n.checkClaimMetrics(t) })
	t.Run("users/aligned-efa-nvidia", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("aligned", harness.TemplateClaim("pair", "aligned-efa-nvidia")))
		cl := claimsOf(claims)
		n.check(t, got, nodes, cl, nil)
		r := byReq(cl[0])
		require.Len(t, r["1-efa"], 1)
		assert.Equal(t, rootOf(r["1-gpu"][0]), rootOf(r["1-efa"][0]), "EFA and GPU on one PCIe root")
		n.deletePod(t, "aligned")
	})
	t.Run("users/shared-efa", func(t *testing.T) {
		a, ca := n.run(t, n.PrinterPod("shared-0", sharedClaim("efa", "shared-efa")))
		b, cb := n.run(t, n.PrinterPod("shared-1", sharedClaim("efa", "shared-efa")))
		require.Len(t, a.Nodes, 4)
		assert.Equal(t, a.Nodes, b.Nodes, "one claim, the same EFAs in both pods")
		n.check(t, a, nodes, claimsOf(ca), nil)
		n.check(t, b, nodes, claimsOf(cb), nil)
		claim, err := c.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, "shared-efa", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Len(t, claim.Status.ReservedFor, 2)
		n.deletePod(t, "shared-0")
		n.deletePod(t, "shared-1")
	})

	tms, all := harness.CreateTemplates(t, c, p5Fixture, resources.GroupsNone, "efakit-")
	t.Run("efakit-claims/gpu-with-efas", func(t *testing.T) {
		require.Contains(t, tms, "gpu-with-efas")
		got, claims := n.run(t, n.PrinterPod("gpu-with-efas", harness.TemplateClaim("c", "efakit-gpu-with-efas")))
		cl := claimsOf(claims)
		n.check(t, got, nodes, cl, nil)
		r := byReq(cl[0])
		require.Len(t, r["efas"], 4)
		for _, e := range r["efas"] {
			assert.Equal(t, rootOf(r["gpu"][0]), rootOf(e))
		}
		n.deletePod(t, "gpu-with-efas")
	})
	t.Run("efakit-claims/efa-1", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("efa-1", harness.TemplateClaim("c", "efakit-efa-1")))
		require.Len(t, got.Nodes, 1)
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "efa-1")
	})
	t.Run("efakit-claims/whole-node", func(t *testing.T) {
		require.NotNil(t, all)
		pod := n.PrinterPod("whole-node", all.Pod.Spec.ResourceClaims...)
		got, claims := n.run(t, pod)
		require.Len(t, got.Nodes, 32)
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "whole-node")
	})
	// The multi-claim container: eight "GPU with its EFAs" claims in one
	// container, every EFA of the node through eight CDI devices.
	t.Run("multi-claim", func(t *testing.T) {
		var pcs []corev1.PodResourceClaim
		for i := range 8 {
			pcs = append(pcs, harness.TemplateClaim(fmt.Sprintf("gpu%d", i), "efakit-gpu-with-efas"))
		}
		got, claims := n.run(t, n.PrinterPod("multi-claim", pcs...))
		t.Logf("a container with eight claims printed:\n%s", got.Raw[:strings.Index(got.Raw, "== metadata")])
		require.Len(t, got.Nodes, 32)
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "multi-claim")
	})
	t.Run("env-libfabric", func(t *testing.T) {
		tmpl := tms["gpu-with-efas"].DeepCopy()
		tmpl.Name, tmpl.Namespace = "with-env", harness.NodeNS
		tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"efas"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: resources.DefaultDriverName, Parameters: runtimeRaw(`{"apiVersion": "efakit.io/v1alpha1", "kind": "EFAConfig", "env": "libfabric"}`)}}}}
		_, err := c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, tmpl, metav1.CreateOptions{})
		require.NoError(t, err)
		got, claims := n.run(t, n.PrinterPod("with-env", harness.TemplateClaim("c", "with-env")))
		cl := claimsOf(claims)
		var rdma []string
		for _, e := range byReq(cl[0])["efas"] {
			rdma = append(rdma, *published[e].Attributes[resources.AttrRDMADev].StringValue)
		}
		got.Env["FI_EFA_IFACE"] = sortedList(got.Env["FI_EFA_IFACE"])
		n.check(t, got, nodes, cl, map[string]string{"FI_PROVIDER": "efa", "FI_EFA_IFACE": sortedList(strings.Join(rdma, ","))})
		n.deletePod(t, "with-env")
	})

	// Faults.
	t.Run("fault/wiped-cdi-container-restart", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("restart", harness.TemplateClaim("efa", "single-efa-claim")))
		id, restarts := n.containerID(t, "restart")
		n.wipeCDI(t)
		n.rewriteAccelSpecs()
		n.killContainer(t, id)
		n.waitRestarted(t, "restart", restarts)
		again, _ := n.waitPrinted(t, "restart")
		assert.Equal(t, got.Nodes, again.Nodes, "the restarted container holds its EFA again")
		n.check(t, again, nodes, claimsOf(claims), nil)
		n.deletePod(t, "restart")
	})
	t.Run("fault/plugin-killed", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("before-kill", harness.TemplateClaim("efa", "single-efa-claim")))
		n.KillEFAKit(syscall.SIGKILL)
		reg := func() []string {
			m, _ := filepath.Glob(filepath.Join(n.Kubelet, "plugins_registry", "dra.net-*-reg.sock"))
			d, _ := filepath.Glob(filepath.Join(n.Kubelet, "plugins", "dra.net", "dra-*.sock"))
			return append(m, d...)
		}
		require.Len(t, reg(), 2, "the killed plugin's registration and DRA sockets stay")
		n.StartEFAKit(p5Fixture)
		// The new pod (a new POD_UID) removed the killed pod's sockets,
		// which the kubelet would have dialled with a back-off for ever.
		assert.Len(t, reg(), 2, "one registration and one DRA socket: the new plugin's; %v", reg())
		assert.Contains(t, n.LogTail("efakit-plugin", 1<<20), "Removed sockets of plugin pods that are gone")
		after, claims2 := n.run(t, n.PrinterPod("after-kill", harness.TemplateClaim("efa", "single-efa-claim")))
		n.check(t, after, nodes, claimsOf(claims2), nil)
		assert.NotEqual(t, got.Nodes, after.Nodes, "the new pod gets another EFA: the first is still held")
		uid := string(claimsOf(claims)[0].UID)
		w, err := cdi.NewWriter(n.CDI, resources.DefaultDriverName)
		require.NoError(t, err)
		ok, err := w.Exists(uid)
		require.NoError(t, err)
		assert.True(t, ok, "the first pod's spec survives the kill")
		n.deletePod(t, "before-kill")
		require.Eventually(t, func() bool { ok, _ := w.Exists(uid); return !ok }, 30*time.Second, 100*time.Millisecond,
			"deleting the pod unprepared its claim through the restarted plugin")
		n.deletePod(t, "after-kill")
	})
	t.Run("fault/reboot", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("rebooted", harness.TemplateClaim("efa", "single-efa-claim")))
		_, restarts := n.containerID(t, "rebooted")
		start := time.Now()
		n.reboot("5b0c7e4e-2f7d-4c55-8d0a-7f3e1c9a6b21")
		n.rewriteAccelSpecs()
		n.StartEFAKit(p5Fixture)
		harness.Eventually(t, func() bool {
			_, r := n.containerID(t, "rebooted")
			return r > restarts
		}, 180*time.Second, 200*time.Millisecond, func() string {
			return fmt.Sprintf("the pod's container started again after the reboot (the kubelet retries a failed prepare at its resync, 60-90 s); kubelet:\n%s", n.LogTail("kubelet", 3000))
		})
		again, _ := n.waitPrinted(t, "rebooted")
		t.Logf("the pod ran again %s after the reboot began", time.Since(start).Round(time.Millisecond))
		assert.Equal(t, got.Nodes, again.Nodes, "the same EFA after the reboot")
		n.check(t, again, nodes, claimsOf(claims), nil)
		assert.Contains(t, n.LogTail("efakit-plugin", 1<<20), "Dropped claims prepared before the node rebooted")
		n.deletePod(t, "rebooted")
	})
	t.Run("fault/unhealthy-efa", func(t *testing.T) {
		const down = "efa-0000-50-00-0"
		state := n.portState(t, p5Fixture, "0000:50:00.0")
		require.NoError(t, os.WriteFile(state, []byte("1: DOWN\n"), 0o644))
		defer func() {
			require.NoError(t, os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644))
			n.rescan()
			require.Eventually(t, func() bool { return len(n.PublishedEFAs(t)[down].Taints) == 0 }, 30*time.Second, 100*time.Millisecond, "taint lifted")
		}()
		n.rescan()
		require.Eventually(t, func() bool { return len(n.PublishedEFAs(t)[down].Taints) == 1 }, 30*time.Second, 100*time.Millisecond,
			"the DOWN EFA tainted; plugin log:\n%s", n.LogTail("efakit-plugin", 3000))
		// A claim for every healthy EFA: exactly the other 31.
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "efas-31", Namespace: harness.NodeNS}}
		tmpl.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efas", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 31}}}
		_, err := c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, tmpl, metav1.CreateOptions{})
		require.NoError(t, err)
		got, claims := n.run(t, n.PrinterPod("next-pod", harness.TemplateClaim("c", "efas-31")))
		require.Len(t, got.Nodes, 31)
		assert.NotContains(t, got.Nodes, nodes.byAddr["0000:50:00.0"], "the DOWN EFA is given to no one")
		assert.NotContains(t, allocated(resources.DefaultDriverName, claimsOf(claims)...), down)
		n.check(t, got, nodes, claimsOf(claims), nil)
		n.deletePod(t, "next-pod")
	})
	t.Run("fault/pod-deleted-efas-to-next-pod", func(t *testing.T) {
		first, claims := n.run(t, n.PrinterPod("first", harness.TemplateClaim("c", "efakit-whole-node-efas")))
		require.Len(t, first.Nodes, 32)
		uid := string(claimsOf(claims)[0].UID)
		// The pod goes at once (grace period 0): the claim is freed and
		// allocated to the next pod before the kubelet unprepares it.
		n.deletePod(t, "first")
		start := time.Now()
		second, claims2 := n.run(t, n.PrinterPod("second", harness.TemplateClaim("c", "efakit-whole-node-efas")))
		t.Logf("the next pod ran %s after the first was deleted", time.Since(start).Round(time.Millisecond))
		assert.Equal(t, first.Nodes, second.Nodes, "every EFA handed to the next pod")
		n.check(t, second, nodes, claimsOf(claims2), nil)
		w, err := cdi.NewWriter(n.CDI, resources.DefaultDriverName)
		require.NoError(t, err)
		require.Eventually(t, func() bool { ok, err := w.Exists(uid); return err == nil && !ok }, 30*time.Second, 100*time.Millisecond,
			"the deleted pod's claim unprepared")
		n.deletePod(t, "second")
	})
	t.Run("users/aligned-all-efa-one-nvidia-refused", func(t *testing.T) {
		// 32 EFAs and a GPU pass the 32 devices a claim may hold: the
		// scheduler says so and the pod stays pending (docs/plugin.md).
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod("all-efas-and-gpu", harness.TemplateClaim("c", "aligned-all-efa-one-nvidia")), metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			p, err := c.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, "all-efas-and-gpu", metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && strings.Contains(cond.Message, "exceeds the claim limit of 32") {
					return true
				}
			}
			return false
		}, 60*time.Second, 200*time.Millisecond)
		n.deletePod(t, "all-efas-and-gpu")
	})
}

// portState is the port state file of the EFA at addr in the plugin's
// unpacked tree of fixture.
func (n *realNode) portState(t *testing.T, fixture, addr string) string {
	var found string
	root := n.Unpack(fixture)
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, "/ports/1/state") && strings.Contains(p, "/"+addr+"/infiniband/") {
			found = p
		}
		return nil
	}))
	require.NotEmpty(t, found, "port state of %s", addr)
	return found
}

// rescan asks the plugin to scan its sysfs now (SIGHUP).
func (n *realNode) rescan() {
	require.NoError(n.T, n.Procs["efakit-plugin"].Process.Signal(syscall.SIGHUP))
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func sortedList(s string) string {
	f := strings.Split(s, ",")
	sort.Strings(f)
	return strings.Join(f, ",")
}
