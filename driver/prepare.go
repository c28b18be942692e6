package driver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
)

// cdiRequests groups a claim's EFAs by request for its CDI spec: one CDI
// device per request. A subrequest ("gpu-efas/4") counts as its request:
// '/' cannot be in a CDI device name, and a container names requests.
func cdiRequests(devs []checkpoint.PreparedDevice) map[string][]cdi.Device {
	out := map[string][]cdi.Device{}
	for _, d := range devs {
		r := baseRequest(d.Request)
		out[r] = append(out[r], cdi.Device{Name: d.RDMAName, Uverbs: d.Uverbs, Major: d.Major, Minor: d.Minor})
	}
	return out
}

func baseRequest(r string) string {
	base, _, _ := strings.Cut(r, "/")
	return base
}

// PrepareResourceClaims prepares each claim: a CDI spec holding only its
// EFAs' uverbs nodes and the libfabric environment, recorded in the
// checkpoint before success is reported. A claim prepared already (the
// kubelet retries, or several pods share it) gets the same answer again.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloadState(ctx)
	for _, c := range claims {
		start := time.Now()
		res, err := p.prepare(c)
		p.Metrics.observe("prepare", time.Since(start), err)
		if err != nil {
			err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			klog.FromContext(ctx).Error(err, "prepare")
		}
		res.Err = err
		out[c.UID] = res
	}
	return out, nil
}

func (p *Plugin) prepare(c *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, error) {
	uid := string(c.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	if prev, ok := p.state.Claims[uid]; ok {
		// Idempotent: the same devices; the spec again if it was lost.
		if ok, err := p.cdi.Exists(uid); len(prev.Devices) > 0 && (err != nil || !ok) {
			if _, err := p.cdi.Write(uid, cdiRequests(prev.Devices)); err != nil {
				return kubeletplugin.PrepareResult{}, err
			}
		}
		return p.result(prev), nil
	}
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, errors.New("not allocated")
	}
	if p.blocked != "" {
		return kubeletplugin.PrepareResult{}, errors.New(p.blocked)
	}
	inUse := map[string]string{}
	for other, oc := range p.state.Claims {
		for _, d := range oc.Devices {
			inUse[d.Device] = other
		}
	}
	claim := checkpoint.Claim{UID: uid, Namespace: c.Namespace, Name: c.Name}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != p.cfg.driverName() {
			continue
		}
		if r.Pool != p.cfg.NodeName {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is in pool %s, this node's pool is %s", r.Device, r.Pool, p.cfg.NodeName)
		}
		// A group device stands for all EFAs of its root.
		names, group := []string{r.Device}, ""
		if members, ok := p.groups[r.Device]; ok {
			names, group = members, r.Device
		}
		for _, name := range names {
			inv, ok := p.inventory[name]
			if !ok || inv.Uverbs == "" {
				return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is not on this node (or has no uverbs device)", name)
			}
			if other, ok := inUse[name]; ok {
				// The last line of defense against two workloads on one EFA.
				return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is already prepared for claim %s", name, other)
			}
			inUse[name] = uid
			claim.Devices = append(claim.Devices, checkpoint.PreparedDevice{
				Request: r.Request, Pool: r.Pool, Device: name, RDMAName: inv.RDMAName, Uverbs: inv.Uverbs,
				PCIAddress: inv.PCIAddress, Major: inv.Major, Minor: inv.Minor, Group: group,
			})
		}
	}
	if len(claim.Devices) > 0 {
		ids, err := p.cdi.Write(uid, cdiRequests(claim.Devices))
		if err != nil {
			return kubeletplugin.PrepareResult{}, err
		}
		claim.CDIDeviceIDs = ids
	}
	next := cloneState(p.state)
	next.Claims[uid] = claim
	if err := p.store.Save(next); err != nil {
		// Not recorded, so not prepared: take the spec away again.
		_ = p.cdi.Remove(uid)
		return kubeletplugin.PrepareResult{}, fmt.Errorf("checkpoint: %w", err)
	}
	p.state = next
	return p.result(claim), nil
}

// reloadState reads the checkpoint again before a kubelet call: during a
// rolling update the other plugin pod (the helper's file lock lets one
// serve at a time) may have prepared or unprepared claims since this one
// loaded it. On a read error the state in memory stands.
func (p *Plugin) reloadState(ctx context.Context) {
	st, err := p.store.Load(p.bootID)
	if err != nil {
		klog.FromContext(ctx).Error(err, "reading the checkpoint again; going on with the state in memory")
		return
	}
	p.state = st
}

func cloneState(s *checkpoint.State) *checkpoint.State {
	n := &checkpoint.State{Version: s.Version, BootID: s.BootID, Claims: make(map[string]checkpoint.Claim, len(s.Claims)+1)}
	for k, v := range s.Claims {
		n.Claims[k] = v
	}
	return n
}

// result is the kubelet's answer for a prepared claim: each EFA with the
// CDI device of its request, and its published attributes as device
// metadata, so a container can read which EFAs it was given.
func (p *Plugin) result(c checkpoint.Claim) kubeletplugin.PrepareResult {
	var devs []kubeletplugin.Device
	seen := map[string]bool{}
	for _, d := range c.Devices {
		// The kubelet knows the allocated devices: a group once, not its
		// members.
		name := d.Device
		if d.Group != "" {
			name = d.Group
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		dev := kubeletplugin.Device{
			Requests: []string{d.Request}, PoolName: p.cfg.NodeName, DeviceName: name,
			CDIDeviceIDs: []string{c.CDIDeviceIDs[baseRequest(d.Request)]},
		}
		if inv, ok := p.inventory[name]; ok {
			dev.Metadata = &kubeletplugin.DeviceMetadata{Attributes: metadataAttributes(inv.Attributes)}
		}
		devs = append(devs, dev)
	}
	return kubeletplugin.PrepareResult{Devices: devs}
}

// UnprepareResourceClaims removes each claim's CDI spec and forgets it. A
// claim that is not prepared is not an error: the kubelet may ask twice.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloadState(ctx)
	for _, c := range claims {
		start := time.Now()
		err := p.unprepare(string(c.UID))
		p.Metrics.observe("unprepare", time.Since(start), err)
		if err != nil {
			err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			klog.FromContext(ctx).Error(err, "unprepare")
		}
		out[c.UID] = err
	}
	return out, nil
}

func (p *Plugin) unprepare(uid string) error {
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return err
	}
	if err := p.cdi.Remove(uid); err != nil {
		return err
	}
	if _, ok := p.state.Claims[uid]; !ok {
		return nil
	}
	next := cloneState(p.state)
	delete(next.Claims, uid)
	if err := p.store.Save(next); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	p.state = next
	return nil
}

// Prepared returns the UIDs of the prepared claims, sorted.
func (p *Plugin) Prepared() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for uid := range p.state.Claims {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

// metadataAttributes are the attributes a container can read about its EFAs
// (device metadata): the published ones.
func metadataAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]resourceapi.DeviceAttribute {
	out := make(map[string]resourceapi.DeviceAttribute, len(attrs))
	for k, v := range attrs {
		out[string(k)] = v
	}
	return out
}
