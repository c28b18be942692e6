package claims_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/podresources/podresourcestest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// These tests run the claim state's prepare results the rest of the way
// to a container, as the root package's container tests do for the whole
// plugin: the kubelet's mapping of a container's claims and requests to
// CDI device IDs, then the CDI library's cache and InjectDevices over the
// spec directory into an OCI runtime spec that holds the pod's own
// environment. Their subject is the libfabric environment (env:
// libfabric) the claim state decides, checked against the containers the
// kubelet's PodResources API says use the claims.

// kubeletCDIDevices is the kubelet's list of CDI device IDs for a
// container (drivertest.KubeletCDIDevices) from these prepare results.
func kubeletCDIDevices(pod *corev1.Pod, ctr corev1.Container, prepared map[string]kubeletplugin.PrepareResult, order []string) []string {
	out := map[string][]drivertest.Prepared{}
	for name, r := range prepared {
		for _, d := range r.Devices {
			out[name] = append(out[name], drivertest.Prepared{Requests: d.Requests, CDIDeviceIDs: d.CDIDeviceIDs})
		}
	}
	return drivertest.KubeletCDIDevices(pod, ctr, out, order)
}

// kubeletNode is a claim state on the p5 fixture with the kubelet's
// PodResources API (the pods it runs) beside it.
type kubeletNode struct {
	*state
	cdiDir string
	pods   *podresourcestest.Server
}

// newKubeletNode starts a claim state in the given group mode whose Pods
// are the kubelet's PodResources API.
func newKubeletNode(t *testing.T, groups resources.GroupMode) *kubeletNode {
	t.Helper()
	kubelet := podresourcestest.Start(t)
	pods, err := podresources.New(kubelet.Socket)
	require.NoError(t, err)
	t.Cleanup(func() { pods.Close() })
	d := newDirs(t)
	n := startOn(t, capture(t), d, func(s *setup) {
		s.cfg.Groups = groups
		s.deps.Pods = pods
	})
	return &kubeletNode{state: n, cdiDir: d.cdi, pods: kubelet}
}

// preparePod makes the pod known to the kubelet (its PodResources API)
// and prepares the claims in one call, as the kubelet does for a pod,
// keyed by claim name.
func (n *kubeletNode) preparePod(pod *corev1.Pod, claims ...*resourceapi.ResourceClaim) map[string]kubeletplugin.PrepareResult {
	n.pods.AddPod(pod)
	byUID := n.prepare(claims...)
	out := map[string]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.Name] = byUID[c.UID]
	}
	return out
}

// errOf is a prepare result's error, "" for none.
func errOf(r kubeletplugin.PrepareResult) string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Error()
}

// containerSees is what container ctrName of a prepared pod gets, the
// same in every claim order the kubelet may walk (drivertest.ContainerSees).
func (n *kubeletNode) containerSees(pod *corev1.Pod, ctrName string, prepared map[string]kubeletplugin.PrepareResult) drivertest.Container {
	n.t.Helper()
	return drivertest.ContainerSees(n.t, n.cdiDir, pod, ctrName, func(ctr corev1.Container, order []string) []string {
		return kubeletCDIDevices(pod, ctr, prepared, order)
	})
}

// uverbs lists the nodes a container must hold for the p5 EFAs at the
// given buses (bus:00.0), read from the fixture by efakit's discovery
// with their device numbers from sysfs.
func uverbs(t *testing.T, buses ...int) []string {
	t.Helper()
	root, err := sysfs.Open(p5)
	require.NoError(t, err)
	defer root.Close()
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	byBus := map[int]*efa.Device{}
	for _, d := range res.EFAs {
		byBus[int(d.PCI.Address.Bus)] = d
	}
	var out []string
	for _, b := range buses {
		d, ok := byBus[b]
		require.True(t, ok && d.Verbs != nil, "bus %02x", b)
		out = append(out, fmt.Sprintf("%s %d:%d", d.Verbs.DevicePath(), d.Verbs.Major, d.Verbs.Minor))
	}
	sort.Strings(out)
	return out
}

// TestContainerGroupDevice: a group device in each group mode gives the
// container every member's node.
func TestContainerGroupDevice(t *testing.T) {
	t.Parallel()
	for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			n := newKubeletNode(t, mode)
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "grp", UID: "c0000000-0000-0000-0000-000000000001"}}
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "efas", Driver: "dra.net", Pool: node, Device: "efa-group-pci0000-55"}}}}
			pod := drivertest.PodUsing("p-grp", []string{"grp"}, map[string][]string{"train": {"grp"}})
			prepared := n.preparePod(pod, c)
			require.NoError(t, prepared["grp"].Err)
			got := n.containerSees(pod, "train", prepared)
			assert.Len(t, got.Nodes, 4)
			assert.Equal(t, uverbs(t, drivertest.P5GPU(1)...), got.Nodes, "the root pci0000:55 holds GPU 1's four EFAs")
			assert.NotContains(t, got.Env, "FI_EFA_IFACE")
		})
	}
}

// TestContainerEnvironment: the opt-in libfabric environment, and the pod
// spec's own variables winning.
func TestContainerEnvironment(t *testing.T) {
	t.Parallel()
	n := newKubeletNode(t, "")
	iface := func(buses []int) string {
		var names []string
		for _, b := range buses {
			names = append(names, fmt.Sprintf("rdmap%ds0", b))
		}
		return strings.Join(names, ",")
	}

	t.Run("user's FI_EFA_IFACE and FI_PROVIDER stay by default", func(t *testing.T) {
		pod := drivertest.PodUsing("u-default", []string{"u1"}, map[string][]string{"train": {"u1"}},
			corev1.EnvVar{Name: "FI_EFA_IFACE", Value: "rdmap79s0"}, corev1.EnvVar{Name: "FI_PROVIDER", Value: "tcp"})
		c := drivertest.EFAClaim("u1", "d0000000-0000-0000-0000-000000000001", map[string][]int{"efas": drivertest.P5GPU(0)}, pod)
		got := n.containerSees(pod, "train", n.preparePod(pod, c))
		assert.Equal(t, "rdmap79s0", got.Env["FI_EFA_IFACE"])
		assert.Equal(t, "tcp", got.Env["FI_PROVIDER"])
	})
	t.Run("env libfabric, one claim: the claim's EFAs", func(t *testing.T) {
		pod := drivertest.PodUsing("u-env", []string{"u2"}, map[string][]string{"train": {"u2"}})
		c := drivertest.WithConfig(drivertest.EFAClaim("u2", "d0000000-0000-0000-0000-000000000002", map[string][]int{"efas": drivertest.P5GPU(1)}, pod),
			resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric)
		prepared := n.preparePod(pod, c)
		require.NoError(t, prepared["u2"].Err)
		got := n.containerSees(pod, "train", prepared)
		assert.Equal(t, "efa", got.Env["FI_PROVIDER"])
		assert.Equal(t, iface(drivertest.P5GPU(1)), got.Env["FI_EFA_IFACE"])
		assert.Equal(t, uverbs(t, drivertest.P5GPU(1)...), got.Nodes)
	})
	t.Run("env libfabric from the class replaces the pod's own FI_EFA_IFACE", func(t *testing.T) {
		// The plugin cannot see the pod's environment (it reads no Pod):
		// the CDI device's variables replace the container's, as CDI
		// replaces a variable by name. env: none leaves them to the pod.
		pod := drivertest.PodUsing("u-own", []string{"u3"}, map[string][]string{"train": {"u3"}},
			corev1.EnvVar{Name: "FI_EFA_IFACE", Value: "rdmap113s0"})
		c := drivertest.WithConfig(drivertest.EFAClaim("u3", "d0000000-0000-0000-0000-000000000003", map[string][]int{"efas": drivertest.P5GPU(2)}, pod),
			resourceapi.AllocationConfigSourceClass, drivertest.EnvLibfabric)
		prepared := n.preparePod(pod, c)
		require.NoError(t, prepared["u3"].Err)
		got := n.containerSees(pod, "train", prepared)
		assert.Equal(t, iface(drivertest.P5GPU(2)), got.Env["FI_EFA_IFACE"], "the claim's EFAs")
		assert.Equal(t, "efa", got.Env["FI_PROVIDER"])
	})
	t.Run("the claim's env none overrides the class's libfabric", func(t *testing.T) {
		pod := drivertest.PodUsing("u-over", []string{"u4"}, map[string][]string{"train": {"u4"}})
		c := drivertest.EFAClaim("u4", "d0000000-0000-0000-0000-000000000004", map[string][]int{"efas": drivertest.P5GPU(3)}, pod)
		drivertest.WithConfig(c, resourceapi.AllocationConfigSourceClass, drivertest.EnvLibfabric)
		drivertest.WithConfig(c, resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"}`)
		got := n.containerSees(pod, "train", n.preparePod(pod, c))
		assert.NotContains(t, got.Env, "FI_EFA_IFACE")
	})
	t.Run("two requests of one claim, one with env, in one container: refused", func(t *testing.T) {
		pod := drivertest.PodUsing("u-two", []string{"u5"}, map[string][]string{"train": {"u5"}})
		c := drivertest.WithConfig(drivertest.EFAClaim("u5", "d0000000-0000-0000-0000-000000000005", map[string][]int{"a": drivertest.P5GPU(4)[:2], "b": drivertest.P5GPU(4)[2:]}, pod),
			resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric, "a")
		r := n.preparePod(pod, c)["u5"]
		assert.Contains(t, errOf(r), "container train of pod default/u-two takes EFAs from 2 requests (claim u5 request a, claim u5 request b), and claim u5 request a sets the libfabric environment")
	})
	t.Run("a container that names one request is checked as taking the claim's every request", func(t *testing.T) {
		// The kubelet's PodResources API names the claims a container
		// uses, not its request filter: refused, saying how to fix it.
		pod := drivertest.PodUsing("u-req", []string{"u9"}, map[string][]string{"a": {"u9/a"}, "b": {"u9/b"}})
		c := drivertest.WithConfig(drivertest.EFAClaim("u9", "d0000000-0000-0000-0000-000000000009", map[string][]int{"a": drivertest.P5GPU(7)[:2], "b": drivertest.P5GPU(7)[2:]}, pod),
			resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric, "a")
		r := n.preparePod(pod, c)["u9"]
		assert.Contains(t, errOf(r), "takes EFAs from 2 requests (claim u9 request a, claim u9 request b)")
		assert.Contains(t, errOf(r), "give the container all its EFAs in one request of one claim")
	})
	t.Run("the kubelet not answering: a claim with env is refused, saying why", func(t *testing.T) {
		pod := drivertest.PodUsing("u-down", []string{"u10"}, map[string][]string{"train": {"u10"}})
		c := drivertest.WithConfig(drivertest.EFAClaim("u10", "d0000000-0000-0000-0000-000000000010", map[string][]int{"efas": drivertest.P5GPU(6)[:1]}, pod),
			resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric)
		n.pods.Fail(errors.New("kubelet restarting"))
		defer n.pods.Fail(nil)
		r := n.preparePod(pod, c)["u10"]
		assert.Contains(t, errOf(r), "the libfabric environment (env: libfabric) is checked against the containers that use the claim: kubelet PodResources API at ")
		assert.Contains(t, errOf(r), "kubelet restarting")
	})
	t.Run("a claim without env beside a prepared shared claim with it is refused", func(t *testing.T) {
		solo := drivertest.PodUsing("u-solo", []string{"u6"}, map[string][]string{"train": {"u6"}})
		shared := drivertest.WithConfig(drivertest.EFAClaim("u6", "d0000000-0000-0000-0000-000000000006", map[string][]int{"efas": drivertest.P5GPU(5)[:2]}, solo),
			resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric)
		require.NoError(t, n.preparePod(solo, shared)["u6"].Err)
		mix := drivertest.PodUsing("u-mix", []string{"u6", "u7"}, map[string][]string{"train": {"u6", "u7"}})
		other := drivertest.EFAClaim("u7", "d0000000-0000-0000-0000-000000000007", map[string][]int{"efas": drivertest.P5GPU(5)[2:]}, mix)
		// The shared claim, prepared already, is not in the kubelet's call.
		r := n.preparePod(mix, other)["u7"]
		assert.Contains(t, errOf(r), "container train of pod default/u-mix takes EFAs from 2 requests (claim u6 request efas, claim u7 request efas), and claim u6 request efas sets the libfabric environment")
	})
	t.Run("bad configuration is refused naming it", func(t *testing.T) {
		pod := drivertest.PodUsing("u-bad", []string{"u8"}, map[string][]string{"train": {"u8"}})
		c := drivertest.WithConfig(drivertest.EFAClaim("u8", "d0000000-0000-0000-0000-000000000008", map[string][]int{"efas": drivertest.P5GPU(6)}, pod),
			resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","evn":"libfabric"}`)
		r := n.preparePod(pod, c)["u8"]
		assert.Contains(t, errOf(r), `configuration 0 (from the claim) for dra.net: parameters: json: unknown field "evn"`)
	})
}

// The tests below run pods that ask for EFAs as an extended resource
// (vpc.amazonaws.com/efa in a container's resources, the single-EFA
// class's extendedResourceName) through the libfabric check and the
// kubelet's mapping of the claim the scheduler makes for them.

const efaResource = "vpc.amazonaws.com/efa"

// extendedPod is a pod whose containers each ask for as many EFAs as
// their buses through the extended resource, and use the named pod
// claims besides (see podUsing).
func extendedPod(name string, buses map[string][]int, claims []string, ctrClaims map[string][]string) *corev1.Pod {
	ctrs := map[string][]string{}
	for ctr := range buses {
		ctrs[ctr] = ctrClaims[ctr]
	}
	pod := drivertest.PodUsing(name, claims, ctrs)
	for i := range pod.Spec.Containers {
		q := resource.MustParse(fmt.Sprint(len(buses[pod.Spec.Containers[i].Name])))
		pod.Spec.Containers[i].Resources.Requests = corev1.ResourceList{efaResource: q}
		pod.Spec.Containers[i].Resources.Limits = corev1.ResourceList{efaResource: q}
	}
	return pod
}

// extendedClaim is the claim the scheduler makes for the pod's extended
// resources (DRAExtendedResource), as it makes it: annotated, one request
// of the single-EFA class per container (container-<i>-request-0)
// allocated the container's EFAs, with the class's env: libfabric, and
// the pod's status mapping each container to its request.
func extendedClaim(pod *corev1.Pod, uid string, buses map[string][]int) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "-extended-resources-x7k2p",
		UID: types.UID(uid), Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}}}
	st := &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: c.Name}
	reqs := map[string][]int{}
	var names []string
	for i, ctr := range pod.Spec.Containers {
		req := fmt.Sprintf("container-%d-request-0", i)
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: req, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: resources.DefaultDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(buses[ctr.Name]))}})
		st.RequestMappings = append(st.RequestMappings, corev1.ContainerExtendedResourceRequest{ContainerName: ctr.Name, ResourceName: efaResource, RequestName: req})
		reqs[req] = buses[ctr.Name]
		names = append(names, req)
	}
	pod.Status.ExtendedResourceClaimStatus = st
	alloc := drivertest.EFAClaim(c.Name, uid, reqs, pod)
	c.Status = alloc.Status
	return drivertest.WithConfig(c, resourceapi.AllocationConfigSourceClass, drivertest.EnvLibfabric, names...)
}

// mixRefused is the refusal of a container that takes EFAs from the
// extended-resource claim with env: libfabric and from a claim of its own.
func mixRefused(pod, ctr string, ext *resourceapi.ResourceClaim, own string) string {
	extSource := "claim " + ext.Name + " (extended resources) request of class " + resources.DefaultDeviceClass
	all := []string{extSource, "claim " + own + " request efas"}
	sort.Strings(all)
	return fmt.Sprintf("container %s of pod default/%s takes EFAs from 2 requests (%s), and %s sets the libfabric environment",
		ctr, pod, strings.Join(all, ", "), extSource)
}

// TestExtendedResourcesLibfabric: with the single-EFA class setting env:
// libfabric, each container of a pod that asks for EFAs as an extended
// resource gets its own request of the scheduler's claim, and sees exactly
// its EFAs and an FI_EFA_IFACE naming them: the claim's requests of one
// class count as one source per container, not as a mix. A container that
// takes the class's request and a claim of its own is refused, naming the
// extended claim's class, whether the extended claim is prepared in the
// same kubelet call or was in an earlier one (from the checkpoint).
func TestExtendedResourcesLibfabric(t *testing.T) {
	t.Parallel()
	n := newKubeletNode(t, "")

	t.Run("each container its own request", func(t *testing.T) {
		buses := map[string][]int{"a": drivertest.P5GPU(0)[:2], "b": drivertest.P5GPU(0)[2:]}
		pod := extendedPod("x-two", buses, nil, nil)
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000001", buses)
		prepared := n.preparePod(pod, ext)
		require.NoError(t, prepared[ext.Name].Err)
		for ctr, b := range buses {
			got := n.containerSees(pod, ctr, prepared)
			assert.Equal(t, uverbs(t, b...), got.Nodes, "%s: exactly its EFAs", ctr)
			assert.Equal(t, fmt.Sprintf("rdmap%ds0,rdmap%ds0", b[0], b[1]), got.Env["FI_EFA_IFACE"], ctr)
			assert.Equal(t, "efa", got.Env["FI_PROVIDER"], ctr)
		}
	})
	t.Run("the class's request and a claim of its own: refused", func(t *testing.T) {
		buses := map[string][]int{"train": drivertest.P5GPU(1)[:2]}
		pod := extendedPod("x-mix", buses, []string{"mix-own"}, map[string][]string{"train": {"mix-own"}})
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000002", buses)
		own := drivertest.EFAClaim("mix-own", "e0000000-0000-0000-0000-000000000003", map[string][]int{"efas": drivertest.P5GPU(1)[2:]}, pod)
		prepared := n.preparePod(pod, ext, own)
		assert.Contains(t, errOf(prepared[ext.Name]), mixRefused("x-mix", "train", ext, "mix-own"))
		assert.Contains(t, errOf(prepared["mix-own"]), mixRefused("x-mix", "train", ext, "mix-own"))
	})
	t.Run("the extended claim prepared in an earlier call", func(t *testing.T) {
		buses := map[string][]int{"a": drivertest.P5GPU(2)[:1], "train": drivertest.P5GPU(2)[1:3]}
		pod := extendedPod("x-later", buses, []string{"later-own"}, map[string][]string{"train": {"later-own"}})
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000004", buses)
		// The kubelet sends a pod's claims in one call; a claim refused
		// (here: not in the call) is sent again alone.
		prepared := n.preparePod(pod, ext)
		require.NoError(t, prepared[ext.Name].Err, "the claim of its own is not prepared yet")
		got := n.containerSees(pod, "a", prepared)
		assert.Equal(t, uverbs(t, drivertest.P5GPU(2)[0]), got.Nodes)
		assert.Equal(t, fmt.Sprintf("rdmap%ds0", drivertest.P5GPU(2)[0]), got.Env["FI_EFA_IFACE"])

		own := drivertest.EFAClaim("later-own", "e0000000-0000-0000-0000-000000000005", map[string][]int{"efas": drivertest.P5GPU(2)[3:]}, pod)
		assert.Contains(t, errOf(n.prepareOne(own)), mixRefused("x-later", "train", ext, "later-own"))
	})
}
