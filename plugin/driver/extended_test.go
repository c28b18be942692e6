package driver_test

import (
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

	"github.com/efakit/efakit/plugin/driver/resources"
)

// These tests run pods that ask for EFAs as an extended resource
// (vpc.amazonaws.com/efa in a container's resources, the single-EFA
// class's extendedResourceName) through the plugin's libfabric check and
// the kubelet's mapping of the claim the scheduler makes for them.

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
	n := newNode(t, p5)
	n.start()
	defer n.stop()
	n.waitSlices()

	t.Run("each container its own request", func(t *testing.T) {
		buses := map[string][]int{"a": p5GPU(0)[:2], "b": p5GPU(0)[2:]}
		pod := extendedPod("x-two", buses, nil, nil)
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000001", buses)
		prepared := n.preparePod(pod, ext)
		require.Empty(t, prepared[ext.Name].Error)
		for ctr, b := range buses {
			got := n.containerSees(pod, ctr, prepared)
			assert.Equal(t, n.uverbs(b...), got.Nodes, "%s: exactly its EFAs", ctr)
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
		assert.Contains(t, prepared[ext.Name].Error, mixRefused("x-mix", "train", ext, "mix-own"))
		assert.Contains(t, prepared["mix-own"].Error, mixRefused("x-mix", "train", ext, "mix-own"))
	})
	t.Run("the extended claim prepared in an earlier call", func(t *testing.T) {
		buses := map[string][]int{"a": p5GPU(2)[:1], "train": p5GPU(2)[1:3]}
		pod := extendedPod("x-later", buses, []string{"later-own"}, map[string][]string{"train": {"later-own"}})
		ext := extendedClaim(pod, "e0000000-0000-0000-0000-000000000004", buses)
		// The kubelet sends a pod's claims in one call; a claim refused
		// (here: not in the call) is sent again alone.
		prepared := n.preparePod(pod, ext)
		require.Empty(t, prepared[ext.Name].Error, "the claim of its own is not prepared yet")
		got := n.containerSees(pod, "a", prepared)
		assert.Equal(t, n.uverbs(p5GPU(2)[0]), got.Nodes)
		assert.Equal(t, fmt.Sprintf("rdmap%ds0", p5GPU(2)[0]), got.Env["FI_EFA_IFACE"])

		own := efaClaim("later-own", "e0000000-0000-0000-0000-000000000005", map[string][]int{"efas": p5GPU(2)[3:]}, pod)
		n.addClaim(own)
		assert.Contains(t, n.prepare(own)[string(own.UID)].Error, mixRefused("x-later", "train", ext, "later-own"))
	})
}
