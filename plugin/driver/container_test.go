package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
)

// This file runs the real plugin's prepare results the rest of the way to
// a container, as far as a machine without a container runtime allows:
// the kubelet's mapping of a container's claims and requests to CDI device
// IDs (pkg/kubelet/cm/dra: GetResources and ClaimInfo.cdiDevicesAsList,
// including its map-ordered walk over claims), then the CDI library's own
// cache and InjectDevices over the plugin's spec directory into an OCI
// runtime spec that already holds the pod's environment, which is what
// containerd's and CRI-O's CDI support call. What the container got is
// read back from that OCI spec.

// ctrGot is what a container got: its device nodes ("path major:minor"),
// environment and bind mounts (container path -> host path).
type ctrGot struct {
	Nodes  []string
	Env    map[string]string
	Mounts map[string]string
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
func kubeletCDIDevices(pod *corev1.Pod, ctr corev1.Container, prepared map[string]*drapb.NodePrepareResourceResponse, order []string) []string {
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
				if req == "" || len(d.RequestNames) == 0 || slices.Contains(d.RequestNames, req) {
					ids = append(ids, d.CdiDeviceIds...)
				}
			}
		}
	}
	return ids
}

// inject is the runtime's CDI step: a fresh CDI cache over the plugin's
// spec directory (as containerd builds one) injects the devices into an
// OCI spec holding the container's own environment.
func inject(t *testing.T, cdiDir string, env []string, ids []string) (ctrGot, error) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "every spec in the directory loads")
	spec := &oci.Spec{Process: &oci.Process{Env: slices.Clone(env)}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		return ctrGot{}, err
	}
	g := ctrGot{Env: map[string]string{}, Mounts: map[string]string{}}
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
	for _, m := range spec.Mounts {
		g.Mounts[m.Destination] = m.Source
	}
	return g, nil
}

// containerSees runs a container of a prepared pod through the kubelet's
// mapping and the CDI injection in several claim orders and requires the
// same result from each: what the container gets may not depend on the
// kubelet's map order.
func (n *kubeletNode) containerSees(pod *corev1.Pod, ctrName string, prepared map[string]*drapb.NodePrepareResourceResponse) ctrGot {
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
		g, err := inject(t, n.cdiDir(), env, kubeletCDIDevices(pod, ctr, prepared, o))
		require.NoError(t, err)
		if i == 0 {
			first = g
			continue
		}
		require.Equal(t, first, g, "claim order %v gives the container something else than %v", o, orders[0])
	}
	return first
}

// preparePod creates the pod and its claims in the API, makes the pod
// known to the kubelet (its PodResources API), and prepares the claims in
// one call, as the kubelet does for a pod, keyed by claim name.
func (n *kubeletNode) preparePod(pod *corev1.Pod, claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodePrepareResourceResponse {
	_, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(n.t, err)
	n.pods.AddPod(pod)
	for _, c := range claims {
		if _, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{}); err != nil {
			n.addClaim(c)
		}
	}
	byUID := n.prepare(claims...)
	out := map[string]*drapb.NodePrepareResourceResponse{}
	for _, c := range claims {
		out[c.Name] = byUID[string(c.UID)]
	}
	return out
}

// uverbs lists the nodes a container must hold for the p5 EFAs at the
// given buses (bus:00.0), read from the fixture by efakit's discovery
// with their device numbers from sysfs.
func (n *kubeletNode) uverbs(buses ...int) []string {
	n.t.Helper()
	root, err := sysfs.Open(n.fixture)
	require.NoError(n.t, err)
	defer root.Close()
	_, res, err := efa.Scan(root)
	require.NoError(n.t, err)
	byBus := map[int]*efa.Device{}
	for _, d := range res.EFAs {
		byBus[int(d.PCI.Address.Bus)] = d
	}
	var out []string
	for _, b := range buses {
		d, ok := byBus[b]
		require.True(n.t, ok && d.Verbs != nil, "bus %02x", b)
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

func (n *kubeletNode) waitSlices() {
	n.t.Helper()
	require.Eventually(n.t, func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) > 0
	}, 10*time.Second, 20*time.Millisecond)
}

// TestContainerGetsItsEFAs: every pod shape, run from the plugin's prepare
// results through the kubelet's mapping and the CDI library's injection:
// the container holds exactly the uverbs nodes of its allocated EFAs,
// whatever the number of claims and requests and whatever the kubelet's
// claim order, no libfabric variable by default, and a device-metadata file
// for each of its requests that names exactly those EFAs.
func TestContainerGetsItsEFAs(t *testing.T) {
	n := newNode(t, p5)
	n.start()
	defer n.stop()
	n.waitSlices()

	check := func(t *testing.T, got ctrGot, buses []int, metaFiles int) {
		t.Helper()
		assert.Equal(t, n.uverbs(buses...), got.Nodes, "exactly the allocated uverbs nodes")
		for k := range got.Env {
			assert.NotContains(t, k, "FI_", "no libfabric variable by default")
		}
		assert.Len(t, got.Mounts, metaFiles, "one metadata file a request: %v", got.Mounts)
		var named []string
		for ctrPath, host := range got.Mounts {
			assert.True(t, strings.HasPrefix(ctrPath, "/var/run/kubernetes.io/dra-device-attributes/"), ctrPath)
			assert.True(t, strings.HasSuffix(ctrPath, "/dra.net-metadata.json"), ctrPath)
			data, err := os.ReadFile(host)
			require.NoError(t, err)
			var md struct {
				Requests []struct {
					Devices []struct {
						Name       string `json:"name"`
						Attributes map[string]struct {
							String *string `json:"string"`
						} `json:"attributes"`
					} `json:"devices"`
				} `json:"requests"`
			}
			require.NoError(t, json.NewDecoder(strings.NewReader(string(data))).Decode(&md))
			for _, r := range md.Requests {
				for _, d := range r.Devices {
					named = append(named, d.Name)
				}
			}
		}
		var want []string
		for _, b := range buses {
			want = append(want, fmt.Sprintf("efa-0000-%02x-00-0", b))
		}
		assert.ElementsMatch(t, want, named, "the metadata names exactly the container's EFAs")
	}

	t.Run("one claim, one request", func(t *testing.T) {
		c := efaClaim("one", "a0000000-0000-0000-0000-000000000001", map[string][]int{"efas": p5GPU(0)})
		pod := podUsing("p-one", []string{"one"}, map[string][]string{"train": {"one"}})
		prepared := n.preparePod(pod, c)
		check(t, n.containerSees(pod, "train", prepared), p5GPU(0), 1)
	})
	t.Run("two requests in one claim", func(t *testing.T) {
		c := efaClaim("tworeq", "a0000000-0000-0000-0000-000000000002", map[string][]int{"a": p5GPU(1)[:2], "b": p5GPU(1)[2:]})
		pod := podUsing("p-tworeq", []string{"tworeq"}, map[string][]string{"all": {"tworeq"}, "only-b": {"tworeq/b"}})
		prepared := n.preparePod(pod, c)
		check(t, n.containerSees(pod, "all", prepared), p5GPU(1), 2)
		check(t, n.containerSees(pod, "only-b", prepared), p5GPU(1)[2:], 1)
	})
	t.Run("two claims in one container", func(t *testing.T) {
		a := efaClaim("two-a", "a0000000-0000-0000-0000-000000000003", map[string][]int{"efas": p5GPU(2)})
		b := efaClaim("two-b", "a0000000-0000-0000-0000-000000000004", map[string][]int{"efas": p5GPU(3)})
		pod := podUsing("p-two", []string{"two-a", "two-b"}, map[string][]string{"train": {"two-a", "two-b"}})
		prepared := n.preparePod(pod, a, b)
		check(t, n.containerSees(pod, "train", prepared), append(p5GPU(2), p5GPU(3)...), 2)
	})
	t.Run("a shared claim in two pods", func(t *testing.T) {
		c := efaClaim("shared", "a0000000-0000-0000-0000-000000000005", map[string][]int{"efas": p5GPU(4)})
		p1 := podUsing("p-shared-1", []string{"shared"}, map[string][]string{"train": {"shared"}})
		p2 := podUsing("p-shared-2", []string{"shared"}, map[string][]string{"train": {"shared"}})
		first := n.preparePod(p1, c)
		second := n.preparePod(p2, c)
		assert.Equal(t, first["shared"].String(), second["shared"].String(), "prepared once, the same answer")
		check(t, n.containerSees(p1, "train", first), p5GPU(4), 1)
		check(t, n.containerSees(p2, "train", second), p5GPU(4), 1)
	})
}

// TestContainerWholeNode: efakit claims' whole-node shape of old, eight
// 4-EFA claims in one container, gets all 32 uverbs nodes and no
// libfabric variable in every claim order; before the container contract,
// the same container got FI_EFA_IFACE naming one claim's four EFAs. With
// env: libfabric on those claims, prepare refuses the mix instead of
// handing libfabric a subset.
func TestContainerWholeNode(t *testing.T) {
	for _, env := range []bool{false, true} {
		t.Run(fmt.Sprintf("env libfabric %v", env), func(t *testing.T) {
			n := newNode(t, p5)
			n.start()
			defer n.stop()
			n.waitSlices()
			var names []string
			for k := range 8 {
				names = append(names, fmt.Sprintf("gpu%d-efas", k))
			}
			pod := podUsing("whole", names, map[string][]string{"train": names})
			var claims []*resourceapi.ResourceClaim
			var all []int
			for k := range 8 {
				c := efaClaim(names[k], fmt.Sprintf("b0000000-0000-0000-0000-%012d", k), map[string][]int{"efas": p5GPU(k)}, pod)
				if env {
					withConfig(c, resourceapi.AllocationConfigSourceClaim, envLibfabric)
				}
				claims = append(claims, c)
				all = append(all, p5GPU(k)...)
			}
			prepared := n.preparePod(pod, claims...)
			if env {
				for _, c := range claims {
					assert.Contains(t, prepared[c.Name].Error, "container train of pod default/whole takes EFAs from")
					assert.Contains(t, prepared[c.Name].Error, "takes EFAs from 8 requests")
					assert.Contains(t, prepared[c.Name].Error, "each sets the libfabric environment")
					assert.Contains(t, prepared[c.Name].Error, "libfabric would use a subset")
				}
				return
			}
			got := n.containerSees(pod, "train", prepared)
			assert.Equal(t, n.uverbs(all...), got.Nodes)
			assert.Len(t, got.Nodes, 32)
			assert.NotContains(t, got.Env, "FI_EFA_IFACE")
			assert.NotContains(t, got.Env, "FI_PROVIDER")
			t.Logf("whole-node container: %d uverbs nodes, environment %v", len(got.Nodes), got.Env)
		})
	}
}
