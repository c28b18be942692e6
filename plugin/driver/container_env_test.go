package driver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// TestContainerGroupDevice: a group device in each group mode gives the
// container every member's node.
func TestContainerGroupDevice(t *testing.T) {
	for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
		t.Run(string(mode), func(t *testing.T) {
			n := newNode(t, p5)
			n.groups = mode
			n.start()
			defer n.stop()
			n.waitSlices()
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "grp", UID: "c0000000-0000-0000-0000-000000000001"}}
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "efas", Driver: "dra.net", Pool: node, Device: "efa-group-pci0000-55"}}}}
			pod := podUsing("p-grp", []string{"grp"}, map[string][]string{"train": {"grp"}})
			prepared := n.preparePod(pod, c)
			require.Empty(t, prepared["grp"].Error)
			got := n.containerSees(pod, "train", prepared)
			assert.Len(t, got.Nodes, 4)
			assert.Equal(t, n.uverbs(p5GPU(1)...), got.Nodes, "the root pci0000:55 holds GPU 1's four EFAs")
			assert.NotContains(t, got.Env, "FI_EFA_IFACE")
		})
	}
}

// TestContainerEnvironment: the opt-in libfabric environment, and the pod
// spec's own variables winning.
func TestContainerEnvironment(t *testing.T) {
	n := newNode(t, p5)
	n.start()
	defer n.stop()
	n.waitSlices()
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
		require.Empty(t, prepared["u2"].Error)
		got := n.containerSees(pod, "train", prepared)
		assert.Equal(t, "efa", got.Env["FI_PROVIDER"])
		assert.Equal(t, iface(p5GPU(1)), got.Env["FI_EFA_IFACE"])
		assert.Equal(t, n.uverbs(p5GPU(1)...), got.Nodes)
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
		require.Empty(t, prepared["u3"].Error)
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
		assert.Contains(t, r.Error, "container train of pod default/u-two takes EFAs from 2 requests (claim u5 request a, claim u5 request b), and claim u5 request a sets the libfabric environment")
	})
	t.Run("a container that names one request is checked as taking the claim's every request", func(t *testing.T) {
		// The kubelet's PodResources API names the claims a container
		// uses, not its request filter: refused, saying how to fix it.
		pod := podUsing("u-req", []string{"u9"}, map[string][]string{"a": {"u9/a"}, "b": {"u9/b"}})
		c := withConfig(efaClaim("u9", "d0000000-0000-0000-0000-000000000009", map[string][]int{"a": p5GPU(7)[:2], "b": p5GPU(7)[2:]}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric, "a")
		r := n.preparePod(pod, c)["u9"]
		assert.Contains(t, r.Error, "takes EFAs from 2 requests (claim u9 request a, claim u9 request b)")
		assert.Contains(t, r.Error, "give the container all its EFAs in one request of one claim")
	})
	t.Run("the kubelet not answering: a claim with env is refused, saying why", func(t *testing.T) {
		pod := podUsing("u-down", []string{"u10"}, map[string][]string{"train": {"u10"}})
		c := withConfig(efaClaim("u10", "d0000000-0000-0000-0000-000000000010", map[string][]int{"efas": p5GPU(6)[:1]}, pod),
			resourceapi.AllocationConfigSourceClaim, envLibfabric)
		n.pods.Fail(errors.New("kubelet restarting"))
		defer n.pods.Fail(nil)
		r := n.preparePod(pod, c)["u10"]
		assert.Contains(t, r.Error, "the libfabric environment (env: libfabric) is checked against the containers that use the claim: kubelet PodResources API at ")
		assert.Contains(t, r.Error, "kubelet restarting")
	})
	t.Run("a claim without env beside a prepared shared claim with it is refused", func(t *testing.T) {
		solo := podUsing("u-solo", []string{"u6"}, map[string][]string{"train": {"u6"}})
		shared := withConfig(efaClaim("u6", "d0000000-0000-0000-0000-000000000006", map[string][]int{"efas": p5GPU(5)[:2]}, solo),
			resourceapi.AllocationConfigSourceClaim, envLibfabric)
		require.Empty(t, n.preparePod(solo, shared)["u6"].Error)
		mix := podUsing("u-mix", []string{"u6", "u7"}, map[string][]string{"train": {"u6", "u7"}})
		other := efaClaim("u7", "d0000000-0000-0000-0000-000000000007", map[string][]int{"efas": p5GPU(5)[2:]}, mix)
		// The shared claim, prepared already, is not in the kubelet's call.
		r := n.preparePod(mix, other)["u7"]
		assert.Contains(t, r.Error, "container train of pod default/u-mix takes EFAs from 2 requests (claim u6 request efas, claim u7 request efas), and claim u6 request efas sets the libfabric environment")
	})
	t.Run("bad configuration is refused naming it", func(t *testing.T) {
		pod := podUsing("u-bad", []string{"u8"}, map[string][]string{"train": {"u8"}})
		c := withConfig(efaClaim("u8", "d0000000-0000-0000-0000-000000000008", map[string][]int{"efas": p5GPU(6)}, pod),
			resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","evn":"libfabric"}`)
		r := n.preparePod(pod, c)["u8"]
		assert.Contains(t, r.Error, `configuration 0 (from the claim) for dra.net: parameters: json: unknown field "evn"`)
	})
}
