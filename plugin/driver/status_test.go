package driver_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// These tests read what the plugin writes into prepared claims'
// status.devices (driver/claimstatus), from the claim as the API holds it.

// claimEntries is a claim's status.devices as the API holds them, keyed
// driver/device, with "/share" for a share.
func claimEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	got, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	require.NoError(t, err)
	out := map[string]resourceapi.AllocatedDeviceStatus{}
	for _, d := range got.Status.Devices {
		k := d.Driver + "/" + d.Device
		if d.ShareID != nil {
			k += "/" + *d.ShareID
		}
		out[k] = d
	}
	return out
}

// waitEntries waits until the claim has n entries and returns them.
func waitEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim, n int) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	require.Eventually(t, func() bool { return len(claimEntries(t, client, c)) == n }, 10*time.Second, 10*time.Millisecond,
		"claim %s: %d entries", c.Name, n)
	return claimEntries(t, client, c)
}

// entryCondition is the condition of type typ of an entry, without its
// transition time; the time apart.
func entryCondition(d resourceapi.AllocatedDeviceStatus, typ string) (claimstatus.Condition, time.Time) {
	for _, c := range d.Conditions {
		if c.Type == typ {
			return claimstatus.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}, c.LastTransitionTime.Time
		}
	}
	return claimstatus.Condition{}, time.Time{}
}

func entryData(t *testing.T, d resourceapi.AllocatedDeviceStatus) claimstatus.EFAData {
	t.Helper()
	require.NotNil(t, d.Data, d.Device)
	var out claimstatus.EFAData
	require.NoError(t, json.Unmarshal(d.Data.Raw, &out))
	return out
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

// TestClaimStatusSingle: a prepare through Serve gives the claim in the
// API an entry for each of its EFAs (dra.net, this node's pool), with
// Ready and Healthy True and the EFA's data; another driver's entry in the
// claim stays as it was.
func TestClaimStatusSingle(t *testing.T) {
	c := claim("single", "c1000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0", "efa-0000-50-00-0")
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"})
	gpu := resourceapi.AllocatedDeviceStatus{Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "GPUReady", LastTransitionTime: metav1.NewTime(time.Unix(1e9, 0))}}}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{gpu}
	n := newNode(t, p5, c)
	n.start()
	defer n.stop()
	require.Empty(t, n.prepare(c)[string(c.UID)].Error)
	got := waitEntries(t, n.client, c, 3)
	assert.Equal(t, gpu, got["gpu.nvidia.com/gpu-0"], "the other driver's entry untouched")
	// Each EFA's own CDI device, the ID the kubelet reports its health
	// under.
	cdiID := func(dev string) string { return "dra.net/efa=" + string(c.UID) + "-efa_" + dev }
	for dev, rdma := range map[string]string{"efa-0000-4f-00-0": "rdmap79s0", "efa-0000-50-00-0": "rdmap80s0"} {
		e := got["dra.net/"+dev]
		assert.Equal(t, node, e.Pool)
		assert.Nil(t, e.ShareID)
		ready, _ := entryCondition(e, "Ready")
		assert.Equal(t, readyCond(cdiID(dev)), ready, dev)
		healthy, _ := entryCondition(e, "Healthy")
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
	c := claim("grp", "c1000000-0000-0000-0000-000000000002", "efa-group-pci0000-44")
	n := newNode(t, p5, c)
	n.groups = resources.GroupsExclusive
	n.start()
	defer n.stop()
	require.Empty(t, n.prepare(c)[string(c.UID)].Error)
	e := waitEntries(t, n.client, c, 1)["dra.net/efa-group-pci0000-44"]
	healthy, _ := entryCondition(e, "Healthy")
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
	c := sharedClaim("two-shares", "c1000000-0000-0000-0000-000000000003",
		share{"a", "efa-0000-4f-00-0", shareA, 1}, share{"b", "efa-0000-4f-00-0", shareB, 2})
	n := newNode(t, p5, c)
	n.sharing = resources.SharingCapacity
	n.start()
	defer n.stop()
	r := n.prepare(c)[string(c.UID)]
	require.Empty(t, r.Error)
	assert.Len(t, r.Devices, 2, "the kubelet gets each share")
	got := waitEntries(t, n.client, c, 2)
	for req, s := range map[string]share{"a": {id: shareA, shares: 1}, "b": {id: shareB, shares: 2}} {
		e, ok := got["dra.net/efa-0000-4f-00-0/"+s.id]
		require.True(t, ok, "share %s: %v", s.id, got)
		want := efa4f
		want.Request, want.CDIDevice, want.Shares = req, "dra.net/efa="+string(c.UID)+"-"+req+"_efa-0000-4f-00-0_"+s.id, s.shares
		assert.Equal(t, want, entryData(t, e))
		ready, _ := entryCondition(e, "Ready")
		assert.Equal(t, readyCond(want.CDIDevice), ready)
	}
}

// statusPlugin is a Plugin on fsys writing claims' status through client,
// with its checkpoint and CDI specs in dir, its status writer running
// until the test ends.
func statusPlugin(t *testing.T, fsys fs.ReadLinkFS, client *fake.Clientset, dir string) *driver.Plugin {
	t.Helper()
	w, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "dra.net")
	require.NoError(t, err)
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: fsys, CDI: w,
		Store: checkpoint.NewStore(filepath.Join(dir, "data")), BootID: bootA, StatusClient: client})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.StatusWriter().Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
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

// TestClaimStatusHealth: when a prepared EFA's port goes DOWN, the next
// scan turns its entry's Healthy False, saying why, and its data's port
// state; when the port is ACTIVE again, True. Ready stays, with the
// transition time of the prepare.
func TestClaimStatusHealth(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	up := edit(t, func(*sysfs.Entry) bool { return true })
	s.cur.Store(up)
	c := claim("h", "c2000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	client := fake.NewClientset(c)
	p := statusPlugin(t, s, client, t.TempDir())
	ctx := context.Background()
	_, err := p.Rescan(ctx)
	require.NoError(t, err)
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	e := waitEntries(t, client, c, 1)["dra.net/efa-0000-4f-00-0"]
	_, prepared := entryCondition(e, "Ready")
	healthy := func() claimstatus.Condition {
		h, _ := entryCondition(claimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"], "Healthy")
		return h
	}
	time.Sleep(1100 * time.Millisecond) // transition times are in seconds

	s.cur.Store(portDown(t, "4f"))
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	down := claimstatus.Condition{Type: "Healthy", Status: "False", Reason: "PortNotActive", Message: "port DOWN"}
	require.Eventually(t, func() bool { return healthy() == down }, 10*time.Second, 10*time.Millisecond, "Healthy: %v", healthy())
	e = claimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"]
	assert.Equal(t, "DOWN", entryData(t, e).PortState)
	ready, at := entryCondition(e, "Ready")
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, prepared, at, "Ready's transition time stays")
	_, turned := entryCondition(e, "Healthy")
	assert.True(t, turned.After(prepared), "Healthy turned at the scan: %v, prepared %v", turned, prepared)

	s.cur.Store(up)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return healthy() == healthyCond }, 10*time.Second, 10*time.Millisecond, "Healthy: %v", healthy())
	_, at = entryCondition(claimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"], "Ready")
	assert.Equal(t, prepared, at, "Ready's transition time stays")
}

// TestClaimStatusRestored: at a restart, a claim restored from the
// checkpoint has its entries read from the API first; unchanged, nothing
// is written. A change after that is written, with the transition times
// the API held.
func TestClaimStatusRestored(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(edit(t, func(*sysfs.Entry) bool { return true }))
	c := claim("r", "c3000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
	client := fake.NewClientset(c)
	dir := t.TempDir()
	ctx := context.Background()
	first := statusPlugin(t, s, client, dir)
	_, err := first.Rescan(ctx)
	require.NoError(t, err)
	res, err := first.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	_, prepared := entryCondition(waitEntries(t, client, c, 1)["dra.net/efa-0000-4f-00-0"], "Ready")
	require.Equal(t, 1, writes(client))
	time.Sleep(1100 * time.Millisecond) // transition times are in seconds

	client.ClearActions()
	p := statusPlugin(t, s, client, dir) // the restarted plugin
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(find(gather(t, p.Registry()), "efakit_plugin_claim_status_writes_total", map[string]string{"outcome": "written"})) == 1
	}, 10*time.Second, 10*time.Millisecond, "the restored claim's status done")
	var read bool
	for _, a := range client.Actions() {
		read = read || (a.GetVerb() == "get" && a.GetResource().Resource == "resourceclaims")
	}
	assert.True(t, read, "the claim read first")
	assert.Zero(t, writes(client), "unchanged: nothing written")

	s.cur.Store(portDown(t, "4f"))
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return writes(client) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := claimEntries(t, client, c)["dra.net/efa-0000-4f-00-0"]
	healthy, _ := entryCondition(e, "Healthy")
	assert.Equal(t, metav1.ConditionFalse, healthy.Status)
	_, at := entryCondition(e, "Ready")
	assert.Equal(t, prepared, at, "Ready's transition time as the API held it")
}

// TestClaimStatusOffPreparePath: the plugin's prepare never waits on the
// API: with every status write blocked, claims are prepared and answered,
// and their entries are written once the API answers again.
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
	p := statusPlugin(t, edit(t, func(*sysfs.Entry) bool { return true }), client, t.TempDir())
	t.Cleanup(func() { close(release) }) // before the writer stops
	ctx := context.Background()
	_, err := p.Rescan(ctx)
	require.NoError(t, err)

	// prepareWithin prepares c, failing when the call takes 10 s.
	prepareWithin := func(c *resourceapi.ResourceClaim) {
		done := make(chan error, 1)
		go func() {
			res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
			if err == nil {
				err = res[c.UID].Err
			}
			done <- err
		}()
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
	waitEntries(t, client, a, 1)
	waitEntries(t, client, b, 1)
}
