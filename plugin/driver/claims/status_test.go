package claims_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// These tests read what the claim state has written into prepared claims'
// status.devices (through driver/claimstatus), from the claim as the API
// holds it.

// withStatus makes a setup write claims' status through client, the
// writer running until the test ends, its outcomes counted in the state's
// metrics (as NewPlugin wires it).
func withStatus(t *testing.T, client *fake.Clientset) func(*setup) {
	return func(s *setup) {
		m := s.deps.Metrics
		s.deps.Status = claimstatus.New(claimstatus.Options{Client: client, DriverName: s.cfg.Driver(), Pool: s.cfg.NodeName,
			Observe: func(out claimstatus.Outcome) { m.ClaimStatus.WithLabelValues(string(out)).Inc() }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.deps.Status.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

func entryData(t *testing.T, d resourceapi.AllocatedDeviceStatus) claimstatus.EFAData {
	t.Helper()
	require.NotNil(t, d.Data, d.Device)
	var out claimstatus.EFAData
	require.NoError(t, json.Unmarshal(d.Data.Raw, &out))
	return out
}

// writes counts the status writes of claims a client was sent.
func writes(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "resourceclaims" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

var (
	readyCond = func(cdiID string) claimstatus.Condition {
		return claimstatus.Condition{Type: "Ready", Status: "True", Reason: "Prepared", Message: "CDI device " + cdiID + " written"}
	}
	healthyCond = claimstatus.Condition{Type: "Healthy", Status: "True", Reason: "Healthy", Message: "port ACTIVE, uverbs device present, bound to efa"}
	// efa4f is the p5 fixture's EFA at 0000:4f:00.0 as an entry's data
	// says it: GPUDirect with its GPU ready by the efa driver's
	// peer-memory provider, dma-buf unknown without a proc root.
	efa4f = claimstatus.EFAData{RDMADevice: "rdmap79s0", UverbsDevice: "uverbs0", UverbsNode: "/dev/infiniband/uverbs0", DeviceNumber: "231:192",
		PCIAddress: "0000:4f:00.0", PortData: claimstatus.PortData{GID: "fe80:0000:0000:0000:0002:0eff:fe4a:0001", LinkRateGbps: 100, PortState: "ACTIVE"},
		GPUDirect: []claimstatus.GPUDirectData{{GPU: "0000:53:00.0", Link: "PXB", Status: "ready", ReadyBy: []string{"peer-memory"}, NotReady: []string{"dma-buf kernel-dma-buf: unknown"},
			NCCL: "PXB: within NCCL's default GPUDirect RDMA level (PXB)"}}}
)

// TestClaimStatusSingle: a prepare gives the claim in the API an entry for
// each of its EFAs (dra.net, this node's pool), with Ready and Healthy
// True and the EFA's data; another driver's entry in the claim stays as
// it was.
func TestClaimStatusSingle(t *testing.T) {
	t.Parallel()
	c := claim("single", "c1000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"})
	gpu := resourceapi.AllocatedDeviceStatus{Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "GPUReady", LastTransitionTime: metav1.NewTime(time.Unix(1e9, 0))}}}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{gpu}
	client := fake.NewClientset(c)
	n := startOn(t, capture(t), newDirs(t), withStatus(t, client))
	require.NoError(t, n.prepareOne(c).Err)
	got := drivertest.WaitEntries(t, client, c, 3)
	assert.Equal(t, gpu, got["gpu.nvidia.com/gpu-0"], "the other driver's entry untouched")
	// Each EFA's own CDI device, the ID the kubelet reports its health
	// under.
	cdiID := func(dev string) string { return "dra.net/efa=" + string(c.UID) + "-efa_" + dev }
	for dev, rdma := range map[string]string{"efa-0000-4f-00-0": "rdmap79s0", "efa-0000-50-00-0": "rdmap80s0"} {
		e := got["dra.net/"+dev]
		assert.Equal(t, node, e.Pool)
		assert.Nil(t, e.ShareID)
		ready, _ := drivertest.EntryCondition(e, "Ready")
		assert.Equal(t, readyCond(cdiID(dev)), ready, dev)
		healthy, _ := drivertest.EntryCondition(e, "Healthy")
		assert.Equal(t, healthyCond, healthy, dev)
		assert.Equal(t, rdma, entryData(t, e).RDMADevice)
	}
	want := efa4f
	want.Request, want.CDIDevice = "efa", cdiID("efa-0000-4f-00-0")
	assert.Equal(t, want, entryData(t, got["dra.net/efa-0000-4f-00-0"]))
}

// TestClaimStatusGroup: a group device has one entry, its data listing
// its members.
func TestClaimStatusGroup(t *testing.T) {
	t.Parallel()
	c := claim("grp", "c1000000-0000-0000-0000-000000000002", "efa-group-pci0000-44")
	client := fake.NewClientset(c)
	n := startOn(t, capture(t), newDirs(t), func(s *setup) { s.cfg.Groups = resources.GroupsExclusive }, withStatus(t, client))
	require.NoError(t, n.prepareOne(c).Err)
	e := drivertest.WaitEntries(t, client, c, 1)["dra.net/efa-group-pci0000-44"]
	healthy, _ := drivertest.EntryCondition(e, "Healthy")
	assert.Equal(t, claimstatus.Condition{Type: "Healthy", Status: "True", Reason: "Healthy", Message: "every member healthy"}, healthy)
	data := entryData(t, e)
	assert.Equal(t, "efa", data.Request)
	assert.Equal(t, "dra.net/efa="+string(c.UID)+"-efa_efa-group-pci0000-44", data.CDIDevice, "one CDI device for the group")
	assert.Empty(t, data.RDMADevice, "the members say which EFAs")
	var members []string
	for _, m := range data.Members {
		members = append(members, m.RDMADevice+" "+m.UverbsNode+" "+m.PortState)
	}
	assert.Equal(t, []string{"rdmap79s0 /dev/infiniband/uverbs0 ACTIVE", "rdmap80s0 /dev/infiniband/uverbs1 ACTIVE",
		"rdmap81s0 /dev/infiniband/uverbs2 ACTIVE", "rdmap82s0 /dev/infiniband/uverbs3 ACTIVE"}, members)
	assert.Equal(t, efa4f, data.Members[0])
}

// TestClaimStatusShares: an EFA shared by capacity has one entry per
// share, with the share's ID, and its data the shares held and the
// request and CDI device of that share.
func TestClaimStatusShares(t *testing.T) {
	t.Parallel()
	c := sharedClaim("two-shares", "c1000000-0000-0000-0000-000000000003",
		share{"a", "efa-0000-4f-00-0", shareA, 1}, share{"b", "efa-0000-4f-00-0", shareB, 2})
	client := fake.NewClientset(c)
	n := startOn(t, capture(t), newDirs(t), sharing(0), withStatus(t, client))
	r := n.prepareOne(c)
	require.NoError(t, r.Err)
	assert.Len(t, r.Devices, 2, "the kubelet gets each share")
	got := drivertest.WaitEntries(t, client, c, 2)
	for req, s := range map[string]share{"a": {id: shareA, shares: 1}, "b": {id: shareB, shares: 2}} {
		e, ok := got["dra.net/efa-0000-4f-00-0/"+s.id]
		require.True(t, ok, "share %s: %v", s.id, got)
		want := efa4f
		want.Request, want.CDIDevice, want.Shares = req, "dra.net/efa="+string(c.UID)+"-"+req+"_efa-0000-4f-00-0_"+s.id, s.shares
		assert.Equal(t, want, entryData(t, e))
		ready, _ := drivertest.EntryCondition(e, "Ready")
		assert.Equal(t, readyCond(want.CDIDevice), ready)
	}
}

// TestClaimStatusHealth: when a prepared EFA's port goes DOWN, the status
// sync after the next scan turns its entry's Healthy False, saying why,
// and its data's port state; when the port is ACTIVE again, True. Ready
// stays, with the transition time of the prepare.
func TestClaimStatusHealth(t *testing.T) {
	t.Parallel()
	up := capture(t)
	s := swapped(up)
	c := claim("h", "c2000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	client := fake.NewClientset(c)
	n := startOn(t, s, newDirs(t), withStatus(t, client))
	require.NoError(t, n.prepareOne(c).Err)
	e := drivertest.WaitEntries(t, client, c, 1)["dra.net/efa-0000-4f-00-0"]
	_, prepared := drivertest.EntryCondition(e, "Ready")
	healthy := func() claimstatus.Condition {
		h, _ := drivertest.EntryCondition(drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"], "Healthy")
		return h
	}
	time.Sleep(1100 * time.Millisecond) // transition times are in seconds

	s.cur.Store(portDown(t, "4f"))
	n.rescan()
	down := claimstatus.Condition{Type: "Healthy", Status: "False", Reason: "PortNotActive", Message: "port DOWN"}
	require.Eventually(t, func() bool { return healthy() == down }, 10*time.Second, 10*time.Millisecond, "Healthy: %v", healthy())
	e = drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"]
	assert.Equal(t, "DOWN", entryData(t, e).PortState)
	ready, at := drivertest.EntryCondition(e, "Ready")
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, prepared, at, "Ready's transition time stays")
	_, turned := drivertest.EntryCondition(e, "Healthy")
	assert.True(t, turned.After(prepared), "Healthy turned at the scan: %v, prepared %v", turned, prepared)

	s.cur.Store(up)
	n.rescan()
	require.Eventually(t, func() bool { return healthy() == healthyCond }, 10*time.Second, 10*time.Millisecond, "Healthy: %v", healthy())
	_, at = drivertest.EntryCondition(drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"], "Ready")
	assert.Equal(t, prepared, at, "Ready's transition time stays")
}

// TestClaimStatusRestored: after a restart, a claim restored from the
// checkpoint has its entries read from the API first; unchanged, nothing
// is written. A change after that is written, with the transition times
// the API held.
func TestClaimStatusRestored(t *testing.T) {
	t.Parallel()
	s := swapped(capture(t))
	c := claim("r", "c3000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	client := fake.NewClientset(c)
	d := dirs{cdi: t.TempDir(), data: t.TempDir()}
	noLock := func(s *setup) { s.files.DataDir = "" }
	first := startOn(t, s, d, noLock, withStatus(t, client))
	require.NoError(t, first.prepareOne(c).Err)
	_, prepared := drivertest.EntryCondition(drivertest.WaitEntries(t, client, c, 1)["dra.net/efa-0000-4f-00-0"], "Ready")
	require.Equal(t, 1, writes(client))
	time.Sleep(1100 * time.Millisecond) // transition times are in seconds

	client.ClearActions()
	n := startOn(t, s, d, noLock, withStatus(t, client)) // the restarted plugin's
	n.rescan()
	require.Eventually(t, func() bool {
		mfs, err := n.deps.Metrics.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "efakit_plugin_claim_status_writes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "written" {
						return true
					}
				}
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the restored claim's status done")
	var read bool
	for _, a := range client.Actions() {
		read = read || (a.GetVerb() == "get" && a.GetResource().Resource == "resourceclaims")
	}
	assert.True(t, read, "the claim read first")
	assert.Zero(t, writes(client), "unchanged: nothing written")

	s.cur.Store(portDown(t, "4f"))
	n.rescan()
	require.Eventually(t, func() bool { return writes(client) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"]
	healthy, _ := drivertest.EntryCondition(e, "Healthy")
	assert.Equal(t, metav1.ConditionFalse, healthy.Status)
	_, at := drivertest.EntryCondition(e, "Ready")
	assert.Equal(t, prepared, at, "Ready's transition time as the API held it")
}

// TestClaimStatusOffPreparePath: a prepare never waits on the API: with
// every status write blocked, claims are prepared and answered, and their
// entries are written once the API answers again.
func TestClaimStatusOffPreparePath(t *testing.T) {
	t.Parallel()
	a := claim("a", "c4000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	b := claim("b", "c4000000-0000-0000-0000-000000000002", "efa-0000-50-00-0")
	client := fake.NewClientset(a, b)
	entered, release := make(chan struct{}, 10), make(chan struct{})
	// The status writer's own client (as StatusClient is): a fake
	// clientset runs its reactions under one lock, so a write blocked here
	// blocks every call of the client, which no API server does.
	client.PrependReactor("patch", "resourceclaims", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() == "status" {
			entered <- struct{}{}
			<-release
		}
		return false, nil, nil
	})
	n := startOn(t, capture(t), newDirs(t), withStatus(t, client))
	t.Cleanup(func() { close(release) }) // before the writer stops

	// prepareWithin prepares c, failing when the call takes 10 s.
	prepareWithin := func(c *resourceapi.ResourceClaim) {
		done := make(chan error, 1)
		go func() { done <- n.prepareOne(c).Err }()
		select {
		case err := <-done:
			require.NoError(t, err, c.Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("prepare of %s waits on a blocked status write", c.Name)
		}
	}
	written := func(c *resourceapi.ResourceClaim) {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("no status write of %s", c.Name)
		}
	}
	prepareWithin(a)
	written(a) // and blocked in the API
	prepareWithin(b)
	release <- struct{}{}
	written(b)
	release <- struct{}{}
	drivertest.WaitEntries(t, client, a, 1)
	drivertest.WaitEntries(t, client, b, 1)
}

// TestClaimStatusGPUDirect: a prepared claim's status names each of its
// EFA's GPU pairs with their GPUDirect readiness, and follows the NVIDIA
// driver when it changes: the P6e case NVIDIA/aicr measured, blocked under
// R595, ready once the node runs R580 with the override.
func TestClaimStatusGPUDirect(t *testing.T) {
	t.Parallel()
	m := gdrcases.Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g", NVIDIA: "595.91.07"}
	s := swapped(m.Build().FS())
	proc := fstest.MapFS{
		"sys/kernel/osrelease": {Data: []byte("6.1.119-129.201.amzn2023.aarch64\n")},
		"driver/nvidia/params": {Data: []byte("ModifyDeviceFiles: 1\nGrdmaPciTopoCheckOverride: 1\n")},
	}
	c := claim("gdr", "c4000000-0000-0000-0000-000000000001", "efa-0000-97-00-0")
	client := fake.NewClientset(c)
	n := startOn(t, s, newDirs(t), func(x *setup) { x.proc = proc; x.files.DataDir = "" }, withStatus(t, client))
	require.NoError(t, n.prepareOne(c).Err)

	gdr := func() []claimstatus.GPUDirectData {
		e, ok := drivertest.ClaimEntries(t, client, c)["dra.net/efa-0000-97-00-0"]
		if !ok || e.Data == nil {
			return nil
		}
		var d claimstatus.EFAData
		require.NoError(t, json.Unmarshal(e.Data.Raw, &d))
		return d.GPUDirect
	}
	blocked := []claimstatus.GPUDirectData{{GPU: "0000:9d:00.0", Link: "NODE", Status: "blocked",
		NotReady: []string{"dma-buf nvidia-topology-check: blocked", "peer-memory efa-peer-memory: blocked"}}}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(blocked, gdr()) }, 10*time.Second, 10*time.Millisecond, "gpuDirect: %+v", gdr())

	// The node moves to R580 with the override: the next scan says ready.
	m.NVIDIA = "580.173.02"
	s.cur.Store(m.Build().FS())
	n.rescan()
	ready := []claimstatus.GPUDirectData{{GPU: "0000:9d:00.0", Link: "NODE", Status: "ready", ReadyBy: []string{"dma-buf"},
		NotReady: []string{"peer-memory efa-peer-memory: blocked"}}}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(ready, gdr()) }, 10*time.Second, 10*time.Millisecond, "gpuDirect: %+v", gdr())
}
