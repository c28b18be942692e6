package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
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

// kubeletCDIDevices is the kubelet's list of CDI device IDs for a
// container (drivertest.KubeletCDIDevices) from these prepare results.
func kubeletCDIDevices(pod *corev1.Pod, ctr corev1.Container, prepared map[string]*drapb.NodePrepareResourceResponse, order []string) []string {
	out := map[string][]drivertest.Prepared{}
	for name, r := range prepared {
		for _, d := range r.Devices {
			out[name] = append(out[name], drivertest.Prepared{Requests: d.RequestNames, CDIDeviceIDs: d.CdiDeviceIds})
		}
	}
	return drivertest.KubeletCDIDevices(pod, ctr, out, order)
}

// containerSees is what container ctrName of a prepared pod gets, the
// same in every claim order the kubelet may walk (drivertest.ContainerSees).
func (n *kubeletNode) containerSees(pod *corev1.Pod, ctrName string, prepared map[string]*drapb.NodePrepareResourceResponse) drivertest.Container {
	n.t.Helper()
	return drivertest.ContainerSees(n.t, n.cdiDir(), pod, ctrName, func(ctr corev1.Container, order []string) []string {
		return kubeletCDIDevices(pod, ctr, prepared, order)
	})
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

	check := func(t *testing.T, got drivertest.Container, buses []int, metaFiles int) {
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
		c := drivertest.EFAClaim("one", "a0000000-0000-0000-0000-000000000001", map[string][]int{"efas": drivertest.P5GPU(0)})
		pod := drivertest.PodUsing("p-one", []string{"one"}, map[string][]string{"train": {"one"}})
		prepared := n.preparePod(pod, c)
		check(t, n.containerSees(pod, "train", prepared), drivertest.P5GPU(0), 1)
	})
	t.Run("two requests in one claim", func(t *testing.T) {
		c := drivertest.EFAClaim("tworeq", "a0000000-0000-0000-0000-000000000002", map[string][]int{"a": drivertest.P5GPU(1)[:2], "b": drivertest.P5GPU(1)[2:]})
		pod := drivertest.PodUsing("p-tworeq", []string{"tworeq"}, map[string][]string{"all": {"tworeq"}, "only-b": {"tworeq/b"}})
		prepared := n.preparePod(pod, c)
		check(t, n.containerSees(pod, "all", prepared), drivertest.P5GPU(1), 2)
		check(t, n.containerSees(pod, "only-b", prepared), drivertest.P5GPU(1)[2:], 1)
	})
	t.Run("two claims in one container", func(t *testing.T) {
		a := drivertest.EFAClaim("two-a", "a0000000-0000-0000-0000-000000000003", map[string][]int{"efas": drivertest.P5GPU(2)})
		b := drivertest.EFAClaim("two-b", "a0000000-0000-0000-0000-000000000004", map[string][]int{"efas": drivertest.P5GPU(3)})
		pod := drivertest.PodUsing("p-two", []string{"two-a", "two-b"}, map[string][]string{"train": {"two-a", "two-b"}})
		prepared := n.preparePod(pod, a, b)
		check(t, n.containerSees(pod, "train", prepared), append(drivertest.P5GPU(2), drivertest.P5GPU(3)...), 2)
	})
	t.Run("a shared claim in two pods", func(t *testing.T) {
		c := drivertest.EFAClaim("shared", "a0000000-0000-0000-0000-000000000005", map[string][]int{"efas": drivertest.P5GPU(4)})
		p1 := drivertest.PodUsing("p-shared-1", []string{"shared"}, map[string][]string{"train": {"shared"}})
		p2 := drivertest.PodUsing("p-shared-2", []string{"shared"}, map[string][]string{"train": {"shared"}})
		first := n.preparePod(p1, c)
		second := n.preparePod(p2, c)
		assert.Equal(t, first["shared"].String(), second["shared"].String(), "prepared once, the same answer")
		check(t, n.containerSees(p1, "train", first), drivertest.P5GPU(4), 1)
		check(t, n.containerSees(p2, "train", second), drivertest.P5GPU(4), 1)
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
			pod := drivertest.PodUsing("whole", names, map[string][]string{"train": names})
			var claims []*resourceapi.ResourceClaim
			var all []int
			for k := range 8 {
				c := drivertest.EFAClaim(names[k], fmt.Sprintf("b0000000-0000-0000-0000-%012d", k), map[string][]int{"efas": drivertest.P5GPU(k)}, pod)
				if env {
					drivertest.WithConfig(c, resourceapi.AllocationConfigSourceClaim, drivertest.EnvLibfabric)
				}
				claims = append(claims, c)
				all = append(all, drivertest.P5GPU(k)...)
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
