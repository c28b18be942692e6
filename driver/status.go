package driver

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/driver/claimstatus"
	"github.com/efakit/efakit/efa"
)

// What a prepared claim's status.devices say (driver/claimstatus writes
// them): for each allocated device of this node (a group once, a shared
// EFA once per share), Ready once prepared, Healthy as the last scan found
// it, and data naming the EFA as the container gets it.

// statusOf is the entries a prepared claim should have now, from its
// record and the last scan. Called with p.mu held.
func (p *Plugin) statusOf(c checkpoint.Claim) claimstatus.Claim {
	out := claimstatus.Claim{Namespace: c.Namespace, Name: c.Name, UID: types.UID(c.UID)}
	index := map[string]int{} // allocated device/share -> its entry
	for _, d := range c.Devices {
		name := d.Device
		if d.Group != "" {
			name = d.Group
		}
		k := name + "/" + d.ShareID
		i, ok := index[k]
		if !ok {
			i = len(out.Devices)
			index[k] = i
			cdiID := c.CDIDeviceIDs[baseRequest(d.Request)]
			out.Devices = append(out.Devices, claimstatus.Device{Device: name, ShareID: d.ShareID,
				Conditions: []claimstatus.Condition{
					{Type: claimstatus.TypeReady, Status: metav1.ConditionTrue, Reason: "Prepared", Message: "CDI device " + cdiID + " written"},
					p.healthCondition(name),
				},
				Data: &claimstatus.EFAData{Request: d.Request, CDIDevice: cdiID}})
		}
		data := out.Devices[i].Data.(*claimstatus.EFAData)
		efaData := p.efaData(d)
		if d.Group != "" {
			data.Members = append(data.Members, efaData)
			continue
		}
		efaData.Request, efaData.CDIDevice, efaData.Shares = data.Request, data.CDIDevice, d.Shares
		*data = efaData
	}
	return out
}

// efaData is what a claim's entry says of one of its EFAs: its record (as
// the container got it) and its port as the last scan read it.
func (p *Plugin) efaData(d checkpoint.PreparedDevice) claimstatus.EFAData {
	out := claimstatus.EFAData{RDMADevice: d.RDMAName, UverbsDevice: d.Uverbs, UverbsNode: (&efa.Verbs{Name: d.Uverbs}).DevicePath(),
		DeviceNumber: devNumber(d.Major, d.Minor), PCIAddress: d.PCIAddress}
	if inv, ok := p.inv.devices[d.Device]; ok && inv.EFA != nil && len(inv.EFA.Ports) > 0 {
		port := inv.EFA.Ports[0]
		out.GID, out.LinkRateGbps, out.PortState = port.GID, port.RateGbps, port.State
	}
	return out
}

// healthCondition is a device's Healthy condition from the last scan.
func (p *Plugin) healthCondition(name string) claimstatus.Condition {
	h, ok := p.inv.health[name]
	switch {
	case !ok:
		return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionUnknown, Reason: "NotChecked", Message: "no scan has found the device yet"}
	case h.status == kubeletplugin.HealthStatusUnhealthy:
		return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionFalse, Reason: camelCase(h.reason), Message: h.message}
	}
	msg := "port ACTIVE, uverbs device present, bound to efa"
	if p.isGroupLocked(name) {
		msg = "every member healthy"
	}
	return claimstatus.Condition{Type: claimstatus.TypeHealthy, Status: metav1.ConditionTrue, Reason: "Healthy", Message: msg}
}

// isGroupLocked is isGroup with p.mu held.
func (p *Plugin) isGroupLocked(name string) bool {
	_, ok := p.inv.healthMembers[name]
	return ok
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
// times are kept). Called with p.mu held; never waits on the API.
func (p *Plugin) setStatus(c checkpoint.Claim, seen []resourceapi.AllocatedDeviceStatus) {
	if p.ops.status == nil {
		return
	}
	p.ops.status.Set(p.statusOf(c), append([]resourceapi.AllocatedDeviceStatus{}, seen...))
}

// syncStatus hands the status writer every prepared claim whose entries
// changed since it was last given them: after a scan, a health change, a
// renumbered EFA, or at start for the claims restored from the
// checkpoint (whose entries the writer reads from the API first). Called
// with p.mu held.
func (p *Plugin) syncStatus() {
	if p.ops.status == nil {
		return
	}
	for _, c := range p.claims.state.Claims {
		want := p.statusOf(c)
		if had, ok := p.ops.status.Wanted(want.UID); ok && apiequality.Semantic.DeepEqual(had, want) {
			continue
		}
		p.ops.status.Set(want, nil)
	}
}
