package claims_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/efakit/efakit/efa"
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

// ctrGot is what a container got: its device nodes ("path major:minor")
// and environment.
type ctrGot struct {
	Nodes []string
	Env   map[string]string
}

// efaClaim is a claim of p5 EFAs by request, e.g. {"efas": [0x4f, 0x50]}
// (the EFA at bus:00.0), reserved for the given pods.
func efaClaim(name, uid string, reqs map[string][]int, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	names := make([]string, 0, len(reqs))
	for r := range reqs {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		for _, bus := range reqs[r] {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: r, Driver: "dra.net", Pool: node, Device: fmt.Sprintf("efa-0000-%02x-00-0", bus)})
		}
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// withConfig adds efakit's opaque configuration to a claim's allocation,
// from the claim (or the class), for the given requests (all when none).
func withConfig(c *resourceapi.ResourceClaim, source resourceapi.AllocationConfigSource, params string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "dra.net", Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	})
	return c
}

const envLibfabric = `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`

// podUsing is a pod whose containers each use the named pod claims
// ("claim" or "claim/request"); pod claim i is the ResourceClaim claims[i]
// named directly.
func podUsing(name string, claims []string, ctrs map[string][]string, env ...corev1.EnvVar) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("pod-" + name)}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "pc-" + c, ResourceClaimName: &c})
	}
	ctrNames := make([]string, 0, len(ctrs))
	for n := range ctrs {
		ctrNames = append(ctrNames, n)
	}
	sort.Strings(ctrNames)
	for _, n := range ctrNames {
		ctr := corev1.Container{Name: n, Image: "busybox", Env: env}
		for _, ref := range ctrs[n] {
			cn, req, _ := strings.Cut(ref, "/")
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: "pc-" + cn, Request: req})
		}
		p.Spec.Containers = append(p.Spec.Containers, ctr)
	}
	return p
}

// kubeletCDIDevices is the kubelet's list of CDI device IDs for a
// container (GetResources): its pod claims' requests and, of the claim
// the scheduler made for the pod's extended resources, the requests the
// pod's status maps to the container for an extended resource it asks
// for, walked claim by claim in the given order (the kubelet walks a Go
// map, so any order happens), each request's devices' IDs appended
// without de-duplication.
func kubeletCDIDevices(pod *corev1.Pod, ctr corev1.Container, prepared map[string]kubeletplugin.PrepareResult, order []string) []string {
	claimRequests := map[string][]string{}
	for _, pc := range pod.Spec.ResourceClaims {
		for _, rc := range ctr.Resources.Claims {
			if rc.Name == pc.Name {
				claimRequests[*pc.ResourceClaimName] = append(claimRequests[*pc.ResourceClaimName], rc.Request)
			}
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		for _, rm := range st.RequestMappings {
			q := ctr.Resources.Requests[corev1.ResourceName(rm.ResourceName)]
			if rm.ContainerName == ctr.Name && !q.IsZero() {
				claimRequests[st.ResourceClaimName] = append(claimRequests[st.ResourceClaimName], rm.RequestName)
			}
		}
	}
	var ids []string
	for _, claimName := range order {
		for _, req := range claimRequests[claimName] {
			for _, d := range prepared[claimName].Devices {
				if req == "" || len(d.Requests) == 0 || slices.Contains(d.Requests, req) {
					ids = append(ids, d.CDIDeviceIDs...)
				}
			}
		}
	}
	return ids
}

// inject is the runtime's CDI step: a fresh CDI cache over the spec
// directory (as containerd builds one) injects the devices into an OCI
// spec holding the container's own environment.
func inject(t *testing.T, cdiDir string, env []string, ids []string) (ctrGot, error) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "every spec in the directory loads")
	spec := &oci.Spec{Process: &oci.Process{Env: slices.Clone(env)}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		return ctrGot{}, err
	}
	g := ctrGot{Env: map[string]string{}}
	for _, d := range spec.Linux.Devices {
		g.Nodes = append(g.Nodes, fmt.Sprintf("%s %d:%d", d.Path, d.Major, d.Minor))
	}
	sort.Strings(g.Nodes)
	for _, e := range spec.Process.Env {
		k, v, _ := strings.Cut(e, "=")
		_, dup := g.Env[k]
		require.False(t, dup, "%s twice in the environment", k)
		g.Env[k] = v
	}
	return g, nil
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

// containerSees runs a container of a prepared pod through the kubelet's
// mapping and the CDI injection in several claim orders and requires the
// same result from each: what the container gets may not depend on the
// kubelet's map order.
func (n *kubeletNode) containerSees(pod *corev1.Pod, ctrName string, prepared map[string]kubeletplugin.PrepareResult) ctrGot {
	t := n.t
	t.Helper()
	var ctr corev1.Container
	for _, c := range pod.Spec.Containers {
		if c.Name == ctrName {
			ctr = c
		}
	}
	var env []string
	for _, e := range ctr.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	var names []string
	for _, pc := range pod.Spec.ResourceClaims {
		names = append(names, *pc.ResourceClaimName)
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		names = append(names, st.ResourceClaimName)
	}
	orders := [][]string{names, slices.Clone(names)}
	slices.Reverse(orders[1])
	r := rand.New(rand.NewPCG(1, uint64(len(names))))
	for range 6 {
		o := slices.Clone(names)
		r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
		orders = append(orders, o)
	}
	var first ctrGot
	for i, o := range orders {
		g, err := inject(t, n.cdiDir, env, kubeletCDIDevices(pod, ctr, prepared, o))
		require.NoError(t, err)
		if i == 0 {
			first = g
			continue
		}
		require.Equal(t, first, g, "claim order %v gives the container something else than %v", o, orders[0])
	}
	return first
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

// p5GPU are the buses of the four EFAs of each p5 GPU (docs/hardware.md).
func p5GPU(k int) []int {
	b := 0x4f + 0x11*k
	return []int{b, b + 1, b + 2, b + 3}
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
			pod := podUsing("p-grp", []string{"grp"}, map[string][]string{"train": {"grp"}})
			prepared := n.preparePod(pod, c)
			require.NoError(t, prepared["grp"].Err)
			got := n.containerSees(pod, "train", prepared)
			assert.Len(t, got.Nodes, 4)
			assert.Equal(t, uverbs(t, p5GPU(1)...), got.Nodes, "the root pci0000:55 holds GPU 1's four EFAs")
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
		pod := podUsing("u-default", []string{"u1"}, map[string][]string{"train": {"u1"}},
			corev1.EnvVar{Name: "FI_EFA_IFACE", Value: "rdmap79s0"}, corev1.EnvVar{Name: "FI_PROVIDER", Value: "tcp"})
		c := efaClaim("u1", "d0000000-0000-0000-0000-000000000001", map[string][]int{"efas": p5GPU(0)}, pod)
		got := n.containerSees(pod, "train", n.preparePod(pod, c))
		assert.Equal(t, "rdmap79s0", got.Env["FI_EFA_IFACE"])
		assert.Equal(t, "tcp", got.Env["FI_PROVIDER"])
	})
	t.Run("env libfabric, one claim: the claim's EFAs", func(t *testing.T) {
		pod := podUsing("u-env", []string{"u2"}, map[string][]string{"train": {"u2"}})
		c := withConfig(efaClaim("u2", "d0000000-0000-0000-0000-000000000002", map[string][]int{"efas": p5GPU(1)}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric)
		prepared := n.preparePod(pod, c)
		require.NoError(t, prepared["u2"].Err)
		got := n.containerSees(pod, "train", prepared)
		assert.Equal(t, "efa", got.Env["FI_PROVIDER"])
		assert.Equal(t, iface(p5GPU(1)), got.Env["FI_EFA_IFACE"])
		assert.Equal(t, uverbs(t, p5GPU(1)...), got.Nodes)
	})
	t.Run("env libfabric from the class replaces the pod's own FI_EFA_IFACE", func(t *testing.T) {
		// The plugin cannot see the pod's environment (it reads no Pod):
		// the CDI device's variables replace the container's, as CDI
		// replaces a variable by name. env: none leaves them to the pod.
		pod := podUsing("u-own", []string{"u3"}, map[string][]string{"train": {"u3"}},
			corev1.EnvVar{Name: "FI_EFA_IFACE", Value: "rdmap113s0"})
		c := withConfig(efaClaim("u3", "d0000000-0000-0000-0000-000000000003", map[string][]int{"efas": p5GPU(2)}, pod),
			resourceapi.AllocationConfigSourceClass, envLibfabric)
		prepared := n.preparePod(pod, c)
		require.NoError(t, prepared["u3"].Err)
		got := n.containerSees(pod, "train", prepared)
		assert.Equal(t, iface(p5GPU(2)), got.Env["FI_EFA_IFACE"], "the claim's EFAs")
		assert.Equal(t, "efa", got.Env["FI_PROVIDER"])
	})
	t.Run("the claim's env none overrides the class's libfabric", func(t *testing.T) {
		pod := podUsing("u-over", []string{"u4"}, map[string][]string{"train": {"u4"}})
		c := efaClaim("u4", "d0000000-0000-0000-0000-000000000004", map[string][]int{"efas": p5GPU(3)}, pod)
		withConfig(c, resourceapi.AllocationConfigSourceClass, envLibfabric)
		withConfig(c, resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"}`)
		got := n.containerSees(pod, "train", n.preparePod(pod, c))
		assert.NotContains(t, got.Env, "FI_EFA_IFACE")
	})
	t.Run("two requests of one claim, one with env, in one container: refused", func(t *testing.T) {
		pod := podUsing("u-two", []string{"u5"}, map[string][]string{"train": {"u5"}})
		c := withConfig(efaClaim("u5", "d0000000-0000-0000-0000-000000000005", map[string][]int{"a": p5GPU(4)[:2], "b": p5GPU(4)[2:]}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric, "a")
		r := n.preparePod(pod, c)["u5"]
		assert.Contains(t, errOf(r), "container train of pod default/u-two takes EFAs from 2 requests (claim u5 request a, claim u5 request b), and claim u5 request a sets the libfabric environment")
	})
	t.Run("a container that names one request is checked as taking the claim's every request", func(t *testing.T) {
		// The kubelet's PodResources API names the claims a container
		// uses, not its request filter: refused, saying how to fix it.
		pod := podUsing("u-req", []string{"u9"}, map[string][]string{"a": {"u9/a"}, "b": {"u9/b"}})
		c := withConfig(efaClaim("u9", "d0000000-0000-0000-0000-000000000009", map[string][]int{"a": p5GPU(7)[:2], "b": p5GPU(7)[2:]}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric, "a")
		r := n.preparePod(pod, c)["u9"]
		assert.Contains(t, errOf(r), "takes EFAs from 2 requests (claim u9 request a, claim u9 request b)")
		assert.Contains(t, errOf(r), "give the container all its EFAs in one request of one claim")
	})
	t.Run("the kubelet not answering: a claim with env is refused, saying why", func(t *testing.T) {
		pod := podUsing("u-down", []string{"u10"}, map[string][]string{"train": {"u10"}})
		c := withConfig(efaClaim("u10", "d0000000-0000-0000-0000-000000000010", map[string][]int{"efas": p5GPU(6)[:1]}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric)
		n.pods.Fail(errors.New("kubelet restarting"))
		defer n.pods.Fail(nil)
		r := n.preparePod(pod, c)["u10"]
		assert.Contains(t, errOf(r), "the libfabric environment (env: libfabric) is checked against the containers that use the claim: kubelet PodResources API at ")
		assert.Contains(t, errOf(r), "kubelet restarting")
	})
	t.Run("a claim without env beside a prepared shared claim with it is refused", func(t *testing.T) {
		solo := podUsing("u-solo", []string{"u6"}, map[string][]string{"train": {"u6"}})
		shared := withConfig(efaClaim("u6", "d0000000-0000-0000-0000-000000000006", map[string][]int{"efas": p5GPU(5)[:2]}, solo),
			resourceapi.AllocationConfigSourceClaim, envLibfabric)
		require.NoError(t, n.preparePod(solo, shared)["u6"].Err)
		mix := podUsing("u-mix", []string{"u6", "u7"}, map[string][]string{"train": {"u6", "u7"}})
		other := efaClaim("u7", "d0000000-0000-0000-0000-000000000007", map[string][]int{"efas": p5GPU(5)[2:]}, mix)
		// The shared claim, prepared already, is not in the kubelet's call.
		r := n.preparePod(mix, other)["u7"]
		assert.Contains(t, errOf(r), "container train of pod default/u-mix takes EFAs from 2 requests (claim u6 request efas, claim u7 request efas), and claim u6 request efas sets the libfabric environment")
	})
	t.Run("bad configuration is refused naming it", func(t *testing.T) {
		pod := podUsing("u-bad", []string{"u8"}, map[string][]string{"train": {"u8"}})
		c := withConfig(efaClaim("u8", "d0000000-0000-0000-0000-000000000008", map[string][]int{"efas": p5GPU(6)}, pod),
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
	pod := podUsing(name, claims, ctrs)
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
	alloc := efaClaim(c.Name, uid, reqs, pod)
	c.Status = alloc.Status
	return withConfig(c, resourceapi.AllocationConfigSourceClass, envLibfabric, names...)
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
		buses := map[string][]int{"a": p5GPU(0)[:2], "b": p5GPU(0)[2:]}
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
		buses := map[string][]int{"train": p5GPU(1)[:2]}
		pod := extendedPod("x-mix", buses, []string{"mix-own"}, map[string][]string{"train": {"mix-own"}})
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000002", buses)
		own := efaClaim("mix-own", "e0000000-0000-0000-0000-000000000003", map[string][]int{"efas": p5GPU(1)[2:]}, pod)
		prepared := n.preparePod(pod, ext, own)
		assert.Contains(t, errOf(prepared[ext.Name]), mixRefused("x-mix", "train", ext, "mix-own"))
		assert.Contains(t, errOf(prepared["mix-own"]), mixRefused("x-mix", "train", ext, "mix-own"))
	})
	t.Run("the extended claim prepared in an earlier call", func(t *testing.T) {
		buses := map[string][]int{"a": p5GPU(2)[:1], "train": p5GPU(2)[1:3]}
		pod := extendedPod("x-later", buses, []string{"later-own"}, map[string][]string{"train": {"later-own"}})
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000004", buses)
		// The kubelet sends a pod's claims in one call; a claim refused
		// (here: not in the call) is sent again alone.
		prepared := n.preparePod(pod, ext)
		require.NoError(t, prepared[ext.Name].Err, "the claim of its own is not prepared yet")
		got := n.containerSees(pod, "a", prepared)
		assert.Equal(t, uverbs(t, p5GPU(2)[0]), got.Nodes)
		assert.Equal(t, fmt.Sprintf("rdmap%ds0", p5GPU(2)[0]), got.Env["FI_EFA_IFACE"])

		own := efaClaim("later-own", "e0000000-0000-0000-0000-000000000005", map[string][]int{"efas": p5GPU(2)[3:]}, pod)
		assert.Contains(t, errOf(n.prepareOne(own)), mixRefused("x-later", "train", ext, "later-own"))
	})
}
