package drivertest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// The kubelet's and the container runtime's side of a prepared claim, as
// far as a machine without a container runtime allows: the kubelet's
// mapping of a container's claims and requests to CDI device IDs
// (pkg/kubelet/cm/dra: GetResources and ClaimInfo.cdiDevicesAsList,
// including its map-ordered walk over claims), then the CDI library's own
// cache and InjectDevices over the spec directory into an OCI runtime spec
// that already holds the pod's environment, which is what containerd's
// and CRI-O's CDI support call.

// Node is the node, and pool, the tests' plugins run on.
const Node = "node-1"

// EnvLibfabric is efakit's opaque configuration asking for the libfabric
// environment.
const EnvLibfabric = `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`

// EFAClaim is a claim of p5 EFAs by request, e.g. {"efas": [0x4f, 0x50]}
// (the EFA at bus:00.0), reserved for the given pods.
func EFAClaim(name, uid string, reqs map[string][]int, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
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
				Request: r, Driver: "dra.net", Pool: Node, Device: fmt.Sprintf("efa-0000-%02x-00-0", bus)})
		}
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// WithConfig adds efakit's opaque configuration to a claim's allocation,
// from the claim (or the class), for the given requests (all when none).
func WithConfig(c *resourceapi.ResourceClaim, source resourceapi.AllocationConfigSource, params string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "dra.net", Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	})
	return c
}

// PodUsing is a pod whose containers each use the named pod claims
// ("claim" or "claim/request"); pod claim i is the ResourceClaim claims[i]
// named directly.
func PodUsing(name string, claims []string, ctrs map[string][]string, env ...corev1.EnvVar) *corev1.Pod {
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

// Prepared is a device of a prepared claim as the kubelet keeps it: the
// requests it serves and its CDI device IDs.
type Prepared struct {
	Requests     []string
	CDIDeviceIDs []string
}

// KubeletCDIDevices is the kubelet's list of CDI device IDs for a
// container (GetResources): its pod claims' requests and, of the claim
// the scheduler made for the pod's extended resources, the requests the
// pod's status maps to the container for an extended resource it asks
// for, walked claim by claim in the given order (the kubelet walks a Go
// map, so any order happens), each request's devices' IDs appended
// without de-duplication. prepared: each claim's devices, by claim name.
func KubeletCDIDevices(pod *corev1.Pod, ctr corev1.Container, prepared map[string][]Prepared, order []string) []string {
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
			for _, d := range prepared[claimName] {
				if req == "" || len(d.Requests) == 0 || slices.Contains(d.Requests, req) {
					ids = append(ids, d.CDIDeviceIDs...)
				}
			}
		}
	}
	return ids
}

// Container is what a container got: its device nodes ("path
// major:minor"), environment and bind mounts (container path -> host
// path).
type Container struct {
	Nodes  []string
	Env    map[string]string
	Mounts map[string]string
}

// Inject is the runtime's CDI step: a fresh CDI cache over the spec
// directory (as containerd builds one) injects the devices into an OCI
// spec holding the container's own environment.
func Inject(t *testing.T, cdiDir string, env []string, ids []string) (Container, error) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "every spec in the directory loads")
	spec := &oci.Spec{Process: &oci.Process{Env: slices.Clone(env)}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		return Container{}, err
	}
	g := Container{Env: map[string]string{}, Mounts: map[string]string{}}
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

// P5GPU are the buses of the four EFAs of p5 GPU k (docs/hardware.md).
func P5GPU(k int) []int {
	b := 0x4f + 0x11*k
	return []int{b, b + 1, b + 2, b + 3}
}

// ContainerSees runs container ctrName of a prepared pod through the
// kubelet's mapping (ids: the CDI device IDs the kubelet gives it for a
// walk of the pod's claims in the given order) and the CDI injection from
// cdiDir, in several claim orders, and requires the same result from
// each: what the container gets may not depend on the kubelet's map
// order.
func ContainerSees(t *testing.T, cdiDir string, pod *corev1.Pod, ctrName string, ids func(ctr corev1.Container, order []string) []string) Container {
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
	var first Container
	for i, o := range orders {
		g, err := Inject(t, cdiDir, env, ids(ctr, o))
		require.NoError(t, err)
		if i == 0 {
			first = g
			continue
		}
		require.Equal(t, first, g, "claim order %v gives the container something else than %v", o, orders[0])
	}
	return first
}
