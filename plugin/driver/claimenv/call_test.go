package claimenv_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimenv"
	"github.com/efakit/efakit/plugin/driver/podresources"
)

const (
	libfabric = `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`
	node      = "node-a"
)

// claim is a claim of namespace ns allocated this node's devices by
// request (request -> devices), reserved for pods, with the libfabric
// environment on the requests named in env ("*": every request).
func claim(name string, reqs map[string][]string, env []string, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	alloc := &resourceapi.AllocationResult{}
	for r, devs := range reqs {
		for _, d := range devs {
			alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: r, Driver: "dra.net", Pool: node, Device: d})
		}
	}
	// Another driver's result on the same request: never this package's.
	alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"})
	if len(env) > 0 {
		cfg := resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.net", Parameters: runtime.RawExtension{Raw: []byte(libfabric)}}}}
		if env[0] != "*" {
			cfg.Requests = env
		}
		alloc.Devices.Config = append(alloc.Devices.Config, cfg)
	}
	c.Status.Allocation = alloc
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("pod-" + p)})
	}
	return c
}

// pod is pod name whose one container "main" uses the claims.
func pod(name string, claims ...string) podresources.Pod {
	ctr := podresources.Container{Name: "main"}
	for _, c := range claims {
		ctr.Claims = append(ctr.Claims, podresources.Claim{Namespace: "ns", Name: c})
	}
	return podresources.Pod{Namespace: "ns", Name: name, Containers: []podresources.Container{ctr}}
}

func call(prepared map[string]checkpoint.Claim, pods []podresources.Pod, claims ...*resourceapi.ResourceClaim) *claimenv.Call {
	c := &claimenv.Call{Driver: "dra.net", Pool: node, Prepared: prepared, Claims: map[string]*resourceapi.ResourceClaim{},
		Pods: claimenv.Pods{Available: true, Listed: pods != nil, List: pods}}
	for _, cl := range claims {
		c.Claims[cl.Namespace+"/"+cl.Name] = cl
	}
	return c
}

var devices = map[string][]cdi.Device{
	"efas": {{Name: "rdmap16s27", Uverbs: "uverbs0"}, {Name: "rdmap32s27", Uverbs: "uverbs1"}},
	"more": {{Name: "rdmap48s27", Uverbs: "uverbs2"}},
}

// TestEnvironment: the variables a request with env: libfabric gets, and
// none for one without; the kubelet asked only where the environment is
// in play.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	c := claim("a", map[string][]string{"efas": {"efa-0", "efa-1"}}, []string{"efas"}, "p")
	env, err := call(nil, []podresources.Pod{pod("p", "a")}, c).Environment(c, devices)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"efas": {"FI_PROVIDER=efa", "FI_EFA_IFACE=rdmap16s27,rdmap32s27"}}, env)

	// The kubelet names the claims a container uses, not its requests:
	// a second request of the claim is a second CDI device in the
	// container, and FI_EFA_IFACE would leave its EFA out.
	two := claim("a", map[string][]string{"efas": {"efa-0", "efa-1"}, "more": {"efa-2"}}, []string{"efas"}, "p")
	_, err = call(nil, []podresources.Pod{pod("p", "a")}, two).Environment(two, devices)
	assert.ErrorContains(t, err, "takes EFAs from 2 requests (claim a request efas, claim a request more), and claim a request efas sets")

	plain := claim("b", map[string][]string{"efas": {"efa-0"}}, nil, "p")
	k := call(nil, nil, plain)
	k.Pods = claimenv.Pods{} // neither available nor asked
	env, err = k.Environment(plain, devices)
	require.NoError(t, err, "no environment anywhere: the kubelet is not needed")
	assert.Nil(t, env)
	on, check, err := k.InPlay(plain)
	require.NoError(t, err)
	assert.Empty(t, on)
	assert.False(t, check)
}

// TestEnvironmentRefusesMix: a container taking EFAs from a request with
// the environment and from any other CDI device is refused, whichever of
// the two claims is prepared second.
func TestEnvironmentRefusesMix(t *testing.T) {
	t.Parallel()
	withEnv := claim("a", map[string][]string{"efas": {"efa-0"}}, []string{"*"}, "p")
	other := claim("b", map[string][]string{"more": {"efa-2"}}, nil, "p")
	pods := []podresources.Pod{pod("p", "a", "b")}

	_, err := call(nil, pods, withEnv, other).Environment(withEnv, devices)
	assert.EqualError(t, err, "container main of pod ns/p takes EFAs from 2 requests (claim a request efas, claim b request more), and claim a request efas sets the libfabric environment (env: libfabric): FI_EFA_IFACE would name only some of its EFAs and libfabric would use a subset; leave env at none (the default) or give the container all its EFAs in one request of one claim")

	// The claim with the environment prepared first: the plain one is
	// refused when it comes.
	prepared := map[string]checkpoint.Claim{"uid-a": {UID: "uid-a", Namespace: "ns", Name: "a",
		Devices: []checkpoint.PreparedDevice{{Request: "efas", Device: "efa-0"}}, Env: map[string][]string{"efas": {"FI_PROVIDER=efa"}}}}
	_, err = call(prepared, pods, other).Environment(other, devices)
	assert.ErrorContains(t, err, "claim a request efas sets the libfabric environment")

	// Another pod's container takes only b: nothing to refuse.
	_, err = call(prepared, []podresources.Pod{pod("p", "a"), pod("q", "b")}, other).Environment(other, devices)
	assert.NoError(t, err)
}

// TestEnvironmentNeedsTheKubelet: the check cannot be skipped; without
// the kubelet's answer the claim is refused, saying why.
func TestEnvironmentNeedsTheKubelet(t *testing.T) {
	t.Parallel()
	c := claim("a", map[string][]string{"efas": {"efa-0"}}, []string{"*"}, "p")
	for name, tc := range map[string]struct {
		pods claimenv.Pods
		want string
	}{
		"no PodResources API": {claimenv.Pods{}, "needs the kubelet's PodResources API"},
		"not asked":           {claimenv.Pods{Available: true}, "the kubelet was not asked"},
		"asked, failed":       {claimenv.Pods{Available: true, Listed: true, Err: errors.New("connection refused")}, "use the claim: connection refused"},
	} {
		k := call(nil, nil, c)
		k.Pods = tc.pods
		_, err := k.Environment(c, devices)
		assert.ErrorContains(t, err, tc.want, name)
	}
	unreserved := claim("u", map[string][]string{"efas": {"efa-0"}}, []string{"*"})
	_, err := call(nil, []podresources.Pod{}, unreserved).Environment(unreserved, devices)
	assert.ErrorContains(t, err, "reserved for no pod")
}

// TestExtendedClasses: of the claim the scheduler made for a pod's
// extended resources, each request of this node maps to its class, and
// a container counts the requests of one class as one source.
func TestExtendedClasses(t *testing.T) {
	t.Parallel()
	ext := claim("ext", map[string][]string{"container-0-request-0": {"efa-0"}, "container-1-request-0": {"efa-1"}}, []string{"*"}, "p")
	ext.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	for _, r := range []string{"container-0-request-0", "container-1-request-0"} {
		ext.Spec.Devices.Requests = append(ext.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: r, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws"}})
	}
	k := call(nil, []podresources.Pod{pod("p", "ext")}, ext)
	assert.Equal(t, map[string]string{"container-0-request-0": "efa.networking.k8s.aws", "container-1-request-0": "efa.networking.k8s.aws"}, k.ExtendedClasses(ext))
	_, err := k.Environment(ext, devices)
	assert.NoError(t, err, "each container gets one request of the class: one source")

	ext.Annotations = nil
	assert.Nil(t, k.ExtendedClasses(ext), "not an extended-resource claim")
	_, err = k.Environment(ext, devices)
	assert.ErrorContains(t, err, "takes EFAs from 2 requests", "an ordinary claim's two requests are two CDI devices")
}

// TestPodsUsers names the pods that use a claim, only when the kubelet said.
func TestPodsUsers(t *testing.T) {
	t.Parallel()
	p := claimenv.Pods{Listed: true, List: []podresources.Pod{pod("p", "a"), pod("q", "a"), pod("r", "b")}}
	assert.Equal(t, " (pods ns/p, ns/q)", p.Users("ns", "a"))
	assert.Empty(t, p.Users("ns", "c"))
	p.Err = errors.New("down")
	assert.Empty(t, p.Users("ns", "a"))
}
