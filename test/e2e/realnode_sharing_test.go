package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// waitEntries waits until a claim's dra.net entries in status.devices
// are want many, each Ready, and returns them.
func (n *realNode) waitEntries(t *testing.T, claim string, want int) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var got map[string]resourceapi.AllocatedDeviceStatus
	harness.Eventually(t, func() bool {
		got = n.statusEntries(t, claim)
		if len(got) != want {
			return false
		}
		for _, d := range got {
			if conditionOf(d, claimstatus.TypeReady).Status != metav1.ConditionTrue {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, func() string {
		return fmt.Sprintf("claim %s: %d entries, want %d Ready:\n%s\nplugin:\n%s", claim, len(got), want, n.claimYAML(t, claim), n.LogTail("efakit-plugin", 2000))
	})
	return got
}

// TestRealNodeClaimStatus: what a claim was prepared with, written by the
// plugin into its status.devices and read back from the API server as
// kubectl get resourceclaim -o yaml does, through the real kubelet: a
// single EFA (Ready, Healthy, the EFA's RDMA device, uverbs node, PCI
// address, GID, rate and port state), its port going DOWN and ACTIVE
// again (Healthy turns within one health interval, no rescan asked for),
// a claim shared by two pods (one entry per EFA), a group device (its
// members).
func TestRealNodeClaimStatus(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.StartEFAKit(p5Fixture)
	n.WaitEFAs(t, 32)
	harness.CreateSeed(t, c, "seed-claims.yaml")
	published := n.PublishedEFAs(t)

	t.Run("single-efa-and-port-down", func(t *testing.T) {
		got, claims := n.run(t, n.PrinterPod("status-single", harness.TemplateClaim("efa", "single-efa-claim")))
		claim := claims["efa"].Name
		entries := n.waitEntries(t, claim, 1)
		t.Logf("kubectl get resourceclaim %s -o yaml (status):\n%s", claim, n.claimYAML(t, claim))
		var dev string
		for dev = range entries {
		}
		e := entries[dev]
		assert.Equal(t, n.Name, e.Pool)
		assert.Equal(t, metav1.ConditionTrue, conditionOf(e, claimstatus.TypeHealthy).Status)
		data := dataOf(t, e)
		pci := *published[dev].Attributes[resources.AttrPCIAddr].StringValue
		assert.Equal(t, pci, data.PCIAddress)
		assert.Equal(t, *published[dev].Attributes[resources.AttrRDMADev].StringValue, data.RDMADevice)
		assert.Equal(t, got.Nodes, []string{data.UverbsNode + " " + data.DeviceNumber}, "the node the container holds")
		assert.Equal(t, "ACTIVE", data.PortState)
		assert.NotEmpty(t, data.GID)
		assert.Positive(t, data.LinkRateGbps)
		assert.Equal(t, "efa", data.Request)
		assert.True(t, strings.HasPrefix(data.CDIDevice, "dra.net/efa="), data.CDIDevice)
		// GPUDirect readiness with the EFA's GPU, as the plugin judged it
		// on this node: the fixture's efa driver names an NVIDIA
		// peer-memory provider, and the GPU is bound to nvidia.
		if assert.Len(t, data.GPUDirect, 1) {
			g := data.GPUDirect[0]
			assert.Equal(t, closestGPU(t, p5Fixture, pci), g.GPU)
			assert.Equal(t, "PXB", g.Link)
			assert.Equal(t, "ready", g.Status, "%+v", g)
			assert.Contains(t, g.ReadyBy, "peer-memory")
		}
		ready := conditionOf(e, claimstatus.TypeReady).LastTransitionTime

		// The port goes DOWN: the health checks (every 10 s, the chart's
		// healthInterval) find it and the entry says so.
		state := n.portState(t, p5Fixture, pci)
		require.NoError(t, os.WriteFile(state, []byte("1: DOWN\n"), 0o644))
		start := time.Now()
		harness.Eventually(t, func() bool {
			return conditionOf(n.statusEntries(t, claim)[dev], claimstatus.TypeHealthy).Status == metav1.ConditionFalse
		}, 30*time.Second, 100*time.Millisecond, func() string { return n.claimYAML(t, claim) })
		took := time.Since(start)
		t.Logf("Healthy turned False %s after the port went DOWN:\n%s", took.Round(time.Millisecond), n.claimYAML(t, claim))
		assert.Less(t, took, 10*time.Second+5*time.Second, "within one health interval (and the write)")
		down := n.statusEntries(t, claim)[dev]
		assert.Equal(t, "PortNotActive", conditionOf(down, claimstatus.TypeHealthy).Reason)
		assert.Equal(t, "DOWN", dataOf(t, down).PortState)
		assert.Equal(t, ready, conditionOf(down, claimstatus.TypeReady).LastTransitionTime, "Ready's transition stays")
		require.NoError(t, os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644))
		harness.Eventually(t, func() bool {
			return conditionOf(n.statusEntries(t, claim)[dev], claimstatus.TypeHealthy).Status == metav1.ConditionTrue
		}, 30*time.Second, 100*time.Millisecond, func() string { return n.claimYAML(t, claim) })
		n.deletePod(t, "status-single")
		// Deallocated with its last pod: the API server drops the entries.
		harness.Eventually(t, func() bool {
			cl, err := c.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(context.Background(), claim, metav1.GetOptions{})
			return err != nil || (cl.Status.Allocation == nil && len(cl.Status.Devices) == 0)
		}, 30*time.Second, 100*time.Millisecond, func() string { return n.claimYAML(t, claim) })
	})
	t.Run("shared-claim", func(t *testing.T) {
		n.run(t, n.PrinterPod("status-shared-0", sharedClaim("efa", "shared-efa")))
		n.run(t, n.PrinterPod("status-shared-1", sharedClaim("efa", "shared-efa")))
		entries := n.waitEntries(t, "shared-efa", 4)
		for dev, e := range entries {
			assert.Nil(t, e.ShareID, dev)
			assert.Equal(t, "efa", dataOf(t, e).Request, dev)
		}
		n.deletePod(t, "status-shared-0")
		assert.Len(t, n.statusEntries(t, "shared-efa"), 4, "still prepared for the other pod")
		n.deletePod(t, "status-shared-1")
	})
	t.Run("group", func(t *testing.T) {
		n.KillEFAKit(syscall.SIGTERM)
		n.StartEFAKit(p5Fixture, "--set", "groups=exclusive")
		n.WaitEFAs(t, 8)
		harness.CreateTemplates(t, c, p5Fixture, resources.GroupsExclusive, "excl-")
		got, claims := n.run(t, n.PrinterPod("status-group", harness.TemplateClaim("c", "excl-efa-group")))
		claim := claims["c"].Name
		entries := n.waitEntries(t, claim, 1)
		t.Logf("a group's entry:\n%s", n.claimYAML(t, claim))
		for dev, e := range entries {
			assert.True(t, strings.HasPrefix(dev, "efa-group-"), dev)
			data := dataOf(t, e)
			require.Len(t, data.Members, 4)
			var nodes []string
			for _, m := range data.Members {
				nodes = append(nodes, m.UverbsNode+" "+m.DeviceNumber)
				assert.Equal(t, "ACTIVE", m.PortState)
			}
			assert.ElementsMatch(t, got.Nodes, nodes, "the members are the container's nodes")
			assert.Equal(t, "Healthy", conditionOf(e, claimstatus.TypeHealthy).Reason)
		}
		n.deletePod(t, "status-group")
		n.KillEFAKit(syscall.SIGTERM)
	})
}

// TestRealNodeSharing: with --sharing=capacity (the chart's sharing.mode)
// on a p5 whose EFAs have two shares each, two pods with independent
// claims of one EFA (a template whose selector names one PCI address)
// land on that EFA through the real scheduler and run through the real
// kubelet, containerd and runc, each with that EFA's uverbs node; a third
// exceeds the EFA's shares and stays Pending; deleting one pod frees its
// share and the third runs; each claim's status.devices names its share.
func TestRealNodeSharing(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.StartEFAKit(p5Fixture, "--set", "sharing.mode=capacity", "--set", "sharing.shares=2")
	n.WaitEFAs(t, 32)
	const dev, pci = "efa-0000-4f-00-0", "0000:4f:00.0"
	d := n.PublishedEFAs(t)[dev]
	require.NotNil(t, d.AllowMultipleAllocations)
	assert.True(t, *d.AllowMultipleAllocations)
	shares := d.Capacity[resources.CapacityShares].Value
	assert.Equal(t, int64(2), shares.Value())
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "share-of-4f", Namespace: harness.NodeNS}}
	tmpl.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: resources.DefaultDeviceClass, Count: 1,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(`device.attributes["dra.net"].pciAddress == %q`, pci)}}}}}}
	_, err := c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, tmpl, metav1.CreateOptions{})
	require.NoError(t, err)
	nodes := fixtureNodes(t, p5Fixture)

	a, ca := n.run(t, n.PrinterPod("share-a", harness.TemplateClaim("efa", "share-of-4f")))
	b, cb := n.run(t, n.PrinterPod("share-b", harness.TemplateClaim("efa", "share-of-4f")))
	t.Logf("share-a's container holds %v, share-b's %v", a.Nodes, b.Nodes)
	assert.Equal(t, []string{nodes.byAddr[pci]}, a.Nodes)
	assert.Equal(t, a.Nodes, b.Nodes, "two independent claims, one EFA")
	claimA, claimB := claimsOf(ca)[0], claimsOf(cb)[0]
	shareOf := func(cl *resourceapi.ResourceClaim) string {
		r := cl.Status.Allocation.Devices.Results[0]
		require.NotNil(t, r.ShareID, "allocated as a share")
		q := r.ConsumedCapacity[resources.CapacityShares]
		assert.Equal(t, int64(1), q.Value())
		return string(*r.ShareID)
	}
	sa, sb := shareOf(claimA), shareOf(claimB)
	assert.NotEqual(t, sa, sb)
	for _, x := range []struct{ claim, share string }{{claimA.Name, sa}, {claimB.Name, sb}} {
		entries := n.waitEntries(t, x.claim, 1)
		e, ok := entries[dev+"/"+x.share]
		require.True(t, ok, "claim %s's entry names its share: %v", x.claim, entries)
		assert.Equal(t, int64(1), dataOf(t, e).Shares)
	}
	t.Logf("share-a's claim:\n%s", n.claimYAML(t, claimA.Name))
	// The EFA's metrics carry both claims.
	harness.Eventually(t, func() bool {
		for _, s := range n.scrape(t, "efakit_efa_tx_bytes_total") {
			if s["dra_device"] == dev {
				return strings.Contains(s["claim_name"], claimA.Name) && strings.Contains(s["claim_name"], claimB.Name)
			}
		}
		return false
	}, 30*time.Second, 500*time.Millisecond, func() string { return fmt.Sprintf("%v", n.scrape(t, "efakit_efa_tx_bytes_total")) })

	// Both shares are taken: a third claim of the EFA does not fit.
	_, err = c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod("share-c", harness.TemplateClaim("efa", "share-of-4f")), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Logf("the third pod: %s", n.waitPending(t, "share-c", ""))
	n.deletePod(t, "share-a")
	// share-b's claim stays prepared (its spec, its entry); share-a's spec
	// is gone.
	w, err := cdi.NewWriter(n.CDI, resources.DefaultDriverName)
	require.NoError(t, err)
	harness.Eventually(t, func() bool { ok, err := w.Exists(string(claimA.UID)); return err == nil && !ok }, 30*time.Second, 100*time.Millisecond,
		func() string { return "share-a's claim unprepared" })
	ok, err := w.Exists(string(claimB.UID))
	require.NoError(t, err)
	assert.True(t, ok, "share-b's spec stays")
	assert.Len(t, n.statusEntries(t, claimB.Name), 1)
	cs, _ := n.waitPrinted(t, "share-c")
	assert.Equal(t, a.Nodes, cs.Nodes, "the freed share, on the same EFA")
	n.deletePod(t, "share-b")
	n.deletePod(t, "share-c")
}

// closestGPU is the PCI address of the GPU closest to the EFA at pci in a
// fixture, as the topology answers.
func closestGPU(t *testing.T, fixture, pci string) string {
	t.Helper()
	topo := harness.ScanFixture(t, fixture)
	a, err := pcie.ParseAddress(pci)
	require.NoError(t, err)
	e := topo.Lookup(a)
	require.NotNil(t, e, pci)
	gpus := topo.Closest(e)
	require.Len(t, gpus, 1)
	return gpus[0].PCI.Address.String()
}
