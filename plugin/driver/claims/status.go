package claims

import (
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/inventory"
)

// What a prepared claim's status.devices say (driver/claimstatus writes
// them): for each allocated device of this node (a group once, a shared
// EFA once per share), Ready once prepared, Healthy as the last scan found
// it, and data naming the EFA as the container gets it.

// statusOf is the entries a prepared claim should have now, from its
// record and the scan of snap.
func (s *State) statusOf(c checkpoint.Claim, snap *inventory.Snapshot) claimstatus.Claim {
	out := claimstatus.Claim{Namespace: c.Namespace, Name: c.Name, UID: types.UID(c.UID)}
	for _, a := range c.Allocated() {
		cdiID := s.allocatedID(c.UID, a)
		conds := []claimstatus.Condition{
			{Type: claimstatus.TypeReady, Status: metav1.ConditionTrue, Reason: "Prepared", Message: "CDI device " + cdiID + " written"},
			healthCondition(snap, a.Name),
		}
		if s.deps.Traffic != nil {
			if tc, ok := s.deps.Traffic.Condition(c.UID, a.Name, a.ShareID, time.Now()); ok {
				conds = append(conds, tc)
			}
		}
		data := &claimstatus.EFAData{Request: a.Request, CDIDevice: cdiID}
		for _, d := range a.EFAs {
			efaData := efaData(snap, d)
			if d.Group != "" {
				data.Members = append(data.Members, efaData)
				continue
			}
			efaData.Request, efaData.CDIDevice, efaData.Shares = data.Request, data.CDIDevice, d.Shares
			*data = efaData
		}
		out.Devices = append(out.Devices, claimstatus.Device{Device: a.Name, ShareID: a.ShareID, Conditions: conds, Data: data})
	}
	return out
}

// efaData is what a claim's entry says of one of its EFAs: its record (as
// the container got it) and its port as the last scan read it.
func efaData(snap *inventory.Snapshot, d checkpoint.PreparedDevice) claimstatus.EFAData {
	out := claimstatus.EFAData{RDMADevice: d.RDMAName, UverbsDevice: d.Uverbs, UverbsNode: (&efa.Verbs{Name: d.Uverbs}).DevicePath(),
		DeviceNumber: devNumber(d.Major, d.Minor), PCIAddress: d.PCIAddress}
	if inv, ok := snap.Devices[d.Device]; ok && inv.EFA != nil && len(inv.EFA.Ports) > 0 {
		port := inv.EFA.Ports[0]
		out.GID, out.LinkRateGbps, out.PortState = port.GID, port.RateGbps, port.State
	}
	out.GPUDirect = gpuDirectData(snap.GPUDirect[d.PCIAddress])
	return out
}

// gpuDirectData is what a claim's entry says of its EFA's GPUDirect pairs.
func gpuDirectData(pairs []gpudirect.Pair) []claimstatus.GPUDirectData {
	var out []claimstatus.GPUDirectData
	for _, p := range pairs {
		g := claimstatus.GPUDirectData{GPU: p.GPU.PCI.Address.String(), Link: p.Link.String(), Status: p.Status.String()}
		for _, m := range p.ReadyBy() {
			g.ReadyBy = append(g.ReadyBy, string(m))
		}
		for _, x := range p.Paths {
			for _, f := range x.Findings {
				if f.Status != gpudirect.Ready {
					g.NotReady = append(g.NotReady, fmt.Sprintf("%s %s: %s", x.Method, f.Check, f.Status))
				}
			}
		}
		if p.NCCL != nil {
			g.NCCL = p.NCCL.Message
			if p.NCCL.Status != gpudirect.Ready {
				g.NotReady = append(g.NotReady, fmt.Sprintf("%s: %s", p.NCCL.Check, p.NCCL.Status))
			}
		}
		out = append(out, g)
	}
	return out
}

// healthCondition is a device's Healthy condition from the last scan.
func healthCondition(snap *inventory.Snapshot, name string) claimstatus.Condition {
	h, ok := snap.Health[name]
	switch {
	case !ok:
		return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionUnknown, Reason: "NotChecked", Message: "no scan has found the device yet"}
	case h.Grade != health.Healthy:
		// Degraded or Unhealthy: the reason names the rule, the message
		// what it found (a degraded device's starts "degraded: ").
		return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionFalse, Reason: camelCase(h.Reason), Message: h.Said()}
	}
	msg := "port ACTIVE, uverbs device present, bound to efa"
	if snap.IsGroup(name) {
		msg = "every member healthy"
	}
	return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionTrue, Reason: "Healthy", Message: msg}
}

// camelCase turns a taint value ("port-not-active") into a condition
// reason ("PortNotActive").
func camelCase(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(s, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	if b.Len() == 0 {
		return "Unhealthy"
	}
	return b.String()
}

// setStatus hands a prepared claim's entries to the status writer, with
// its status.devices as the kubelet read it (seen: their transition
// times are kept). It never waits on the API.
func (s *State) setStatus(snap *inventory.Snapshot, c checkpoint.Claim, seen []resourceapi.AllocatedDeviceStatus) {
	if s.deps.Status == nil {
		return
	}
	s.deps.Status.Set(s.statusOf(c, snap), append([]resourceapi.AllocatedDeviceStatus{}, seen...))
}

// SyncStatus hands the status writer every prepared claim (as last saved)
// whose entries changed since it was last given them: after a scan, a
// health change, a renumbered EFA, or at start for the claims restored
// from the checkpoint (whose entries the writer reads from the API
// first). It takes no lock.
func (s *State) SyncStatus(snap *inventory.Snapshot) {
	if s.deps.Status == nil {
		return
	}
	for _, c := range s.Committed().Claims {
		want := s.statusOf(c, snap)
		if had, ok := s.deps.Status.Wanted(want.UID); ok && apiequality.Semantic.DeepEqual(had, want) {
			continue
		}
		s.deps.Status.Set(want, nil)
	}
}
