package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
	"github.com/efakit/efakit/topology"
)

// byReq maps each request of an allocation to its devices.
func byReq(cl *resourceapi.ResourceClaim) map[string][]string {
	out := map[string][]string{}
	for _, r := range cl.Status.Allocation.Devices.Results {
		out[r.Request] = append(out[r.Request], r.Device)
	}
	return out
}

func template(t *testing.T, tms []resources.Template, name string) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	for _, tm := range tms {
		if tm.Template.Name == name {
			return tm.Template
		}
	}
	t.Fatalf("no template %s", name)
	return nil
}

// TestSchedulerPairsEFAs runs the users' claims and the templates `efakit
// claims` prints through the real kube-scheduler, against the slices the
// plugin publishes for a p5 node (the plugin on the fixture, with the real
// API server), and prepares them over the plugin's socket as the kubelet
// does. Then it deletes the plugin's slice, restarts the plugin and wipes
// its CDI directory: each heals, and no prepared claim is lost.
func TestSchedulerPairsEFAs(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := harness.NewE2ENode(t, c, "p5-node", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone)
	published := n.Slices(32)

	// A steady node makes no API writes: two rescans later, the slice is
	// the same object.
	n.RescanNow()
	n.RescanNow()
	time.Sleep(500 * time.Millisecond)
	again := n.Slices(32)
	assert.Equal(t, published[0].ResourceVersion, again[0].ResourceVersion, "a rescan that finds nothing new writes nothing")

	// The users' aligned-efa-nvidia: the EFA shares the GPU's root.
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "aligned-efa-nvidia")), &tmpl))
	pair, pairNodes := n.Schedule("pair", tmpl.Spec.Spec, 1)
	reqs := byReq(pair)
	require.Len(t, reqs["1-efa"], 1)
	assert.Equal(t, n.GPURoot[reqs["1-gpu"][0]], n.EFARoot[reqs["1-efa"][0]], "EFA and GPU on one PCIe root")
	assert.Len(t, pairNodes, 1, "exactly the allocated uverbs device")

	// The users' shared-efa, one claim shared by two pods: both bound, the
	// same four EFAs.
	var shared resourceapi.ResourceClaim
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "shared-efa")), &shared))
	claim, nodes := n.Schedule("shared", shared.Spec, 2)
	assert.Len(t, claim.Status.ReservedFor, 2, "reserved for both pods")
	assert.Len(t, nodes, 4)

	// efakit's "GPU with its EFAs" for the GPUs left: each claim gets the
	// four EFAs behind its GPU's switch. The scheduler fills first, so the
	// pair and the shared claim used the first two roots.
	tms, _ := resources.ClaimTemplates(n.Topo, resources.GroupsNone, "")
	gpuWithEFAs := template(t, tms, "gpu-with-efas")
	for i := range 6 {
		claim, nodes := n.Schedule(fmt.Sprintf("gpu-efas-%d", i), gpuWithEFAs.Spec.Spec, 1)
		reqs := byReq(claim)
		require.Len(t, reqs["efas"], 4)
		for _, e := range reqs["efas"] {
			assert.Equal(t, n.GPURoot[reqs["gpu"][0]], n.EFARoot[e])
		}
		assert.Len(t, nodes, 4)
	}

	// The plugin's metrics counted the prepares.
	resp, err := http.Get(n.HTTP + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `efakit_plugin_calls_total{op="prepare",result="ok"}`)
	assert.Contains(t, string(body), "efakit_plugin_devices 32")

	// A deleted ResourceSlice comes back.
	require.NoError(t, c.Client.ResourceV1().ResourceSlices().Delete(ctx, published[0].Name, metav1.DeleteOptions{}))
	n.Slices(32)

	// A plugin restart, and a CDI directory wiped while the claims stay
	// prepared: the specs are written again, and the claims are still held.
	n.Stop()
	require.NoError(t, os.RemoveAll(filepath.Join(n.Dir, "cdi")))
	n.Start()
	_, err = n.CDI.Load(string(pair.UID))
	require.NoError(t, err, "the pair's CDI spec is back after the restart, before any call")
	assert.Equal(t, pairNodes, n.Prepare(pair), "the same device, prepared again after the restart")
	un, err := n.DRA.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: pair.Name, Uid: string(pair.UID)}}})
	require.NoError(t, err)
	assert.Empty(t, un.Claims[string(pair.UID)].Error)
	_, err = n.CDI.Load(string(pair.UID))
	assert.ErrorIs(t, err, os.ErrNotExist, "unprepared: its spec is gone")
}

// TestSchedulerTemplates: pods that name a ResourceClaimTemplate (the
// users' aligned-efa-nvidia, one claim per pod) get their claims from the
// real controller manager, the scheduler pairs each, and each prepares.
func TestSchedulerTemplates(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := harness.NewE2ENode(t, c, "p4d-node", "../../testdata/sysfs/p4d.24xlarge.sysfs", resources.GroupsNone)
	n.Slices(4)
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims.yaml", "aligned-efa-nvidia")), &tmpl))
	tmpl.Name = "p4d-aligned-efa-nvidia"
	roots := map[string]bool{}
	// p4d has four roots, each with one EFA: four pods fit.
	for _, claim := range n.FromTemplate(&tmpl, 4) {
		reqs := byReq(claim)
		assert.Equal(t, n.GPURoot[reqs["1-gpu"][0]], n.EFARoot[reqs["1-efa"][0]])
		roots[n.EFARoot[reqs["1-efa"][0]]] = true
		assert.Len(t, n.Prepare(claim), 1)
	}
	assert.Len(t, roots, 4, "one pod per root")
}

// TestSchedulerNeuron: the users' aligned-efa-neuron template (four Neuron
// devices and four EFAs of one devicegroup4_id) through the controller
// manager and the scheduler on a trn2 node: each claim's EFAs are exactly
// those of its Neuron devices.
func TestSchedulerNeuron(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := harness.NewE2ENode(t, c, "trn2-node", "../../testdata/sysfs/trn2.48xlarge.sysfs", resources.GroupsNone)
	published := n.Slices(16)
	efaAddr := map[string]string{}
	for _, s := range published {
		for _, d := range s.Spec.Devices {
			efaAddr[d.Name] = *d.Attributes[resources.AttrPCIBusID].StringValue
		}
	}
	neuronEFA := map[string]string{}
	for _, d := range n.Topo.Of(topology.KindNeuron) {
		neuronEFA[fmt.Sprintf("neuron-%d", d.NeuronIndex)] = d.Groups.Group1
	}
	var tmpl resourceapi.ResourceClaimTemplate
	require.NoError(t, yaml.Unmarshal([]byte(claimDoc(t, "seed-claims-neuron.yaml", "aligned-efa-neuron")), &tmpl))
	// 16 Neuron devices, four groups of four.
	for _, claim := range n.FromTemplate(&tmpl, 4) {
		reqs := byReq(claim)
		var want, got []string
		for _, nd := range reqs["4-neurons"] {
			want = append(want, neuronEFA[nd])
		}
		for _, e := range reqs["4-efas"] {
			got = append(got, efaAddr[e])
		}
		sort.Strings(want)
		sort.Strings(got)
		assert.Equal(t, want, got, "the four EFAs of the four Neuron devices")
		assert.Len(t, n.Prepare(claim), 4)
	}
}

// TestSchedulerGroupModes: the "GPUs with their EFA group" template through
// the real scheduler on p5en nodes publishing groups, exclusive and mixed;
// a group prepares as every EFA of its root.
func TestSchedulerGroupModes(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	for _, mode := range []resources.GroupMode{resources.GroupsExclusive, resources.GroupsMixed} {
		t.Run(string(mode), func(t *testing.T) {
			n := harness.NewE2ENode(t, c, "p5en-"+string(mode), "../../testdata/sysfs/p5en.48xlarge.sysfs", mode)
			devices := 4 // four roots, one group each
			if mode == resources.GroupsMixed {
				devices += 16
			}
			n.Slices(devices)
			tms, _ := resources.ClaimTemplates(n.Topo, mode, "")
			tm := template(t, tms, "gpus-with-efa-group")
			for i := range 4 {
				claim, nodes := n.Schedule(fmt.Sprintf("%s-group-%d", mode, i), tm.Spec.Spec, 1)
				reqs := byReq(claim)
				require.Len(t, reqs["gpus"], 2)
				require.Len(t, reqs["efas"], 1)
				for _, g := range reqs["gpus"] {
					assert.Equal(t, n.GPURoot[g], n.EFARoot[reqs["efas"][0]], "the group of the GPUs' root")
				}
				assert.Len(t, nodes, 4, "a group gives the container all four EFAs of its root")
			}
		})
	}
}

// claimDoc is the YAML document of the users' claims that defines name.
func claimDoc(t *testing.T, file, name string) string {
	t.Helper()
	for _, doc := range harness.SplitDocs(harness.ReadClaimsFile(t, file)) {
		if strings.Contains(doc, "name: "+name+"\n") {
			return doc
		}
	}
	t.Fatalf("no %s in %s", name, file)
	return ""
}

// TestAPIServerRestart: the API server goes away and comes back; the
// plugin's slices and prepared claims survive, and a slice deleted
// afterwards is published again (the plugin's watch reconnected).
func TestAPIServerRestart(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := harness.NewE2ENode(t, c, "p5-restart", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone)
	n.Slices(32)
	one := resourceapi.ResourceClaimSpec{}
	one.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 1}}}
	claim, nodes := n.Schedule("before-restart", one, 1)
	require.NoError(t, c.RestartAPIServer())
	published := n.Slices(32)
	assert.Equal(t, nodes, n.Prepare(claim), "still prepared, same device")
	require.NoError(t, c.Client.ResourceV1().ResourceSlices().Delete(ctx, published[0].Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + n.Name})
		return err == nil && len(l.Items) == 1 && l.Items[0].Name != published[0].Name
	}, 60*time.Second, 200*time.Millisecond, "the deleted slice published again after the restart")
	after, _ := n.Schedule("after-restart", one, 1)
	assert.Len(t, n.Prepare(after), 1)
}
