package claims

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// cdiRequests groups a claim's EFAs by request for its CDI spec: one CDI
// device per allocated device of the request (a group once, a shared EFA
// once per share), whose ID the kubelet gets for it, with the variables
// the checkpoint recorded for the request. A subrequest
// ("gpu-efas/4") counts as its request: '/' cannot be in a CDI device
// name, and a container names requests.
func cdiRequests(c checkpoint.Claim) map[string]cdi.Request {
	out := map[string]cdi.Request{}
	for _, d := range c.Devices {
		r := baseRequest(d.Request)
		req := out[r]
		dev := cdi.Device{Name: d.RDMAName, Uverbs: d.Uverbs, Major: d.Major, Minor: d.Minor}
		// Two shares of one EFA in one request are one node.
		if !slices.Contains(req.Devices, dev) {
			req.Devices = append(req.Devices, dev)
		}
		name := allocatedName(d)
		i := slices.IndexFunc(req.Allocated, func(a cdi.Allocated) bool { return a.Name == name })
		if i < 0 {
			i = len(req.Allocated)
			req.Allocated = append(req.Allocated, cdi.Allocated{Name: name})
		}
		req.Allocated[i].Devices = append(req.Allocated[i].Devices, dev)
		req.Env = c.Env[r]
		// A claim prepared by an efakit that gave the kubelet one CDI
		// device per request keeps it: its containers start with it.
		_, req.Whole = c.CDIDeviceIDs[r]
		out[r] = req
	}
	return out
}

// allocatedName names the allocated device an EFA of a claim belongs to:
// its group, or itself; a share's ID after '_'. The kubelet knows each
// such device once, and reports its health under its CDI device ID.
func allocatedName(d checkpoint.PreparedDevice) string {
	name := d.Device
	if d.Group != "" {
		name = d.Group
	}
	if d.ShareID != "" {
		name += "_" + d.ShareID
	}
	return name
}

// allocatedID is the fully qualified CDI device ID of the allocated device
// an EFA of claim uid belongs to.
func (s *State) allocatedID(uid string, d checkpoint.PreparedDevice) string {
	return s.files.CDI.ID(cdi.AllocatedName(uid, baseRequest(d.Request), allocatedName(d)))
}

func baseRequest(r string) string {
	base, _, _ := strings.Cut(r, "/")
	return base
}

// devNumber is a character device's number as the checkpoint keeps it.
func devNumber(major, minor uint32) string { return fmt.Sprintf("%d:%d", major, minor) }

// batch gathers the changes a kubelet call makes to the checkpoint, so
// that the call saves it once (one fsync), however many claims it holds.
// Between begin and commit, s.cur is the call's own copy: each claim
// sees those prepared or unprepared before it in the call.
type batch struct {
	base    *checkpoint.State // the state before the call, kept if the save fails
	changed map[string]bool   // claims recorded, changed or forgotten by the call
	added   []string          // claims recorded by the call: their specs go if the save fails
}

// begin starts a batch.
func (s *State) begin() *batch {
	b := &batch{base: s.cur, changed: map[string]bool{}}
	s.cur = cloneState(s.cur)
	return b
}

// put records a prepared claim in the call's state.
func (s *State) put(b *batch, c checkpoint.Claim) {
	s.cur.Claims[c.UID] = c
	b.changed[c.UID] = true
}

// commit saves the call's state if it changed. When the save fails, the
// state before the call stands and the specs of the claims the call
// recorded are removed again: not recorded, so not prepared.
func (s *State) commit(b *batch) error {
	if len(b.changed) == 0 {
		// The State the checkpoint Store remembers: the next call's
		// Reload need not read the file.
		s.setState(b.base)
		return nil
	}
	if err := s.files.Store.Save(s.cur); err != nil {
		s.setState(b.base)
		for _, uid := range b.added {
			_ = s.files.CDI.Remove(uid)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	s.setState(s.cur)
	return nil
}

// Prepare prepares each claim, deciding on snap (the inventory the
// caller read as the call began): a CDI spec holding only its
// EFAs' uverbs nodes (numbers read from sysfs now) and, where its
// configuration asks for it, the libfabric environment; recorded in the
// checkpoint before success is reported, all claims of the call in one
// save. A claim prepared already (the kubelet retries, or several pods
// share it) gets the same devices again, checked against its allocation
// and against sysfs. The time observed for a claim is its own work and the
// call's save.
func (s *State) Prepare(ctx context.Context, snap *inventory.Snapshot, claims []*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	waited := s.deps.Metrics.Waited("prepare", ctx)
	call := make(map[string]*resourceapi.ResourceClaim, len(claims))
	for _, c := range claims {
		call[c.Namespace+"/"+c.Name] = c
	}
	// What the decisions need from the API server and the kubelet is read
	// first, without the lock (see callReads). The checkpoint is read once:
	// the helper serializes the kubelet's calls across both pods of a
	// rolling update, so no other prepare or unprepare changes it before
	// the decisions.
	s.mu.Lock()
	s.reloadState(ctx)
	holders, pods := s.toRead(snap, claims, call)
	s.mu.Unlock()
	rd := s.read(ctx, holders, pods)
	s.mu.Lock()
	defer s.mu.Unlock()
	logger := klog.FromContext(ctx)
	b := s.begin()
	took := make([]time.Duration, len(claims))
	for i, c := range claims {
		start := time.Now()
		res, err := s.prepare(ctx, snap, b, c, call, rd)
		took[i] = time.Since(start)
		res.Err = err
		out[c.UID] = res
	}
	start := time.Now()
	saveErr := s.commit(b)
	saved := time.Since(start)
	for i, c := range claims {
		res := out[c.UID]
		if saveErr != nil && b.changed[string(c.UID)] {
			res = kubeletplugin.PrepareResult{Err: saveErr}
		}
		if res.Err != nil {
			if e := storageError(res.Err); e != res.Err {
				res.Err = e
				s.kickStorageCheck()
			}
		}
		s.deps.Metrics.Observe("prepare", took[i]+saved, res.Err)
		// One line per claim at the default verbosity: which claim got
		// which EFAs (published and RDMA names), how long it took, and
		// how long the kubelet's call waited before (the helper's claim
		// reads, the calls before it).
		if res.Err != nil {
			res.Err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, res.Err)
			logger.Error(res.Err, "Prepare failed", "claim", klog.KObj(c), "uid", c.UID, "duration", took[i]+saved, "waited", waited)
		} else {
			prepared := s.cur.Claims[string(c.UID)]
			logger.Info("Prepared claim", "claim", klog.KObj(c), "uid", c.UID, "devices", claimDevices(prepared), "duration", took[i]+saved, "waited", waited)
			// Written by the status writer, off this path.
			s.setStatus(snap, prepared, c.Status.Devices)
		}
		out[c.UID] = res
	}
	return out
}

// wanted is one EFA a claim's allocation gives: its request, for a member
// of an allocated group device the group, and for an EFA shared by
// capacity the allocation's share and the shares it consumes.
type wanted struct {
	Request, Device, Group string
	ShareID                string
	Shares                 int64
}

// allocated lists the EFAs of this node that the claim's allocation holds,
// group devices expanded into their members, in allocation order.
func (s *State) allocated(snap *inventory.Snapshot, c *resourceapi.ResourceClaim) ([]wanted, error) {
	if c.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	var out []wanted
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != s.node.Driver {
			continue
		}
		if r.Pool != s.node.Name {
			return nil, fmt.Errorf("device %s is in pool %s, this node's pool is %s", r.Device, r.Pool, s.node.Name)
		}
		if members, ok := snap.Groups[r.Device]; ok {
			for _, m := range members {
				out = append(out, wanted{Request: r.Request, Device: m, Group: r.Device})
			}
			continue
		}
		w := wanted{Request: r.Request, Device: r.Device}
		if r.ShareID != nil {
			w.ShareID = string(*r.ShareID)
			if q, ok := r.ConsumedCapacity[resources.CapacityShares]; ok {
				w.Shares = q.Value()
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func (s *State) prepare(ctx context.Context, snap *inventory.Snapshot, b *batch, c *resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim, rd *callReads) (kubeletplugin.PrepareResult, error) {
	uid := string(c.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	want, err := s.allocated(snap, c)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	if prev, ok := s.cur.Claims[uid]; ok {
		return s.prepareAgain(ctx, snap, b, prev, want)
	}
	if snap.StandAside != "" {
		return kubeletplugin.PrepareResult{}, errors.New(snap.StandAside)
	}
	held := s.held("")
	claim := checkpoint.Claim{UID: uid, Namespace: c.Namespace, Name: c.Name}
	r := sysread.New(s.files.Sysfs)
	for _, w := range want {
		inv, ok := snap.Devices[w.Device]
		if !ok || inv.Uverbs == "" {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is not on this node (or has no uverbs device)", w.Device)
		}
		cur, err := readCurrent(r, inv.PCIAddress)
		if err != nil {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s: %w", w.Device, err)
		}
		num := devNumber(cur.Verbs.Major, cur.Verbs.Minor)
		// The last line of defense against two workloads on one EFA: the
		// EFA itself, and the character device a container would open
		// (after a module reload the same number may name another EFA).
		// Shares of an EFA shared by capacity hold it together; an EFA
		// held alone, or wanted alone, is never given to two claims.
		shared := w.ShareID != ""
		if other, ok := blocking(held["pci:"+inv.PCIAddress], shared, inv.PCIAddress, rd.released); ok {
			how := ""
			if shared {
				how = " alone: it cannot be shared"
			} else if s.holdsShare(other, inv.PCIAddress) {
				how = " as a share: a claim that holds it alone must wait until every share is unprepared"
			}
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is already prepared for claim %s%s", w.Device, s.describeClaim(other, rd), how)
		}
		if other, ok := blocking(held["dev:"+num], shared, inv.PCIAddress, rd.released); ok {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is %s (%s) now, a device number that containers of claim %s were given (the uverbs devices were numbered anew, an efa or ib_uverbs module reload): refused until that claim is unprepared", w.Device, cur.Verbs.Name, num, s.describeClaim(other, rd))
		}
		me := holder{uid: uid, shared: shared, pci: inv.PCIAddress}
		held["pci:"+inv.PCIAddress] = append(held["pci:"+inv.PCIAddress], me)
		held["dev:"+num] = append(held["dev:"+num], me)
		if cur.RDMAName != inv.RDMAName || cur.Verbs.Name != inv.Uverbs {
			s.deps.AskRescan()
		}
		claim.Devices = append(claim.Devices, checkpoint.PreparedDevice{
			Request: w.Request, Pool: s.node.Name, Device: w.Device, RDMAName: cur.RDMAName, Uverbs: cur.Verbs.Name,
			PCIAddress: inv.PCIAddress, Major: cur.Verbs.Major, Minor: cur.Verbs.Minor, Group: w.Group,
			ShareID: w.ShareID, Shares: w.Shares,
		})
	}
	env, err := s.environment(c, claim, call, rd)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	claim.Env = env
	if classes := s.extendedClasses(c); len(classes) > 0 {
		claim.ExtendedClasses = classes
	}
	if len(claim.Devices) > 0 {
		ids, err := s.files.CDI.Write(uid, cdiRequests(claim))
		if err != nil {
			return kubeletplugin.PrepareResult{}, err
		}
		claim.CDIDeviceIDs = ids
	}
	s.put(b, claim)
	b.added = append(b.added, uid)
	return s.result(snap, claim), nil
}

// prepareAgain answers a prepare of a claim prepared already: the same
// devices, provided the claim's allocation still names them, with the
// device numbers checked against sysfs and the spec written again if it
// was lost or the numbers changed.
func (s *State) prepareAgain(ctx context.Context, snap *inventory.Snapshot, b *batch, prev checkpoint.Claim, want []wanted) (kubeletplugin.PrepareResult, error) {
	var had []wanted
	for _, d := range prev.Devices {
		had = append(had, wanted{Request: d.Request, Device: d.Device, Group: d.Group, ShareID: d.ShareID, Shares: d.Shares})
	}
	sorted := func(ws []wanted) []wanted {
		return slices.SortedFunc(slices.Values(ws), func(a, b wanted) int {
			return cmp.Or(strings.Compare(a.Request, b.Request), strings.Compare(a.Device, b.Device), strings.Compare(a.Group, b.Group),
				strings.Compare(a.ShareID, b.ShareID), cmp.Compare(a.Shares, b.Shares))
		})
	}
	if !slices.Equal(sorted(had), sorted(want)) {
		return kubeletplugin.PrepareResult{}, fmt.Errorf("prepared for %s, but now allocated %s: unprepare it first", describe(had), describe(want))
	}
	claim, _, err := s.refreshIn(ctx, b, prev)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	return s.result(snap, claim), nil
}

func describe(ws []wanted) string {
	if len(ws) == 0 {
		return "no EFA of this node"
	}
	var s []string
	for _, w := range ws {
		d := w.Request + ":" + w.Device
		if w.ShareID != "" {
			d += fmt.Sprintf(" (share %s, %d shares)", w.ShareID, w.Shares)
		}
		s = append(s, d)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// reloadState reads the checkpoint again before a kubelet call if it
// changed: during a rolling update the other plugin pod (the helper's file
// lock lets one serve at a time) may have prepared or unprepared claims
// since this one loaded it. Unchanged since this plugin last read or wrote
// it (one stat tells), it is not read. On a read error the state in memory
// stands.
func (s *State) reloadState(ctx context.Context) {
	st, err := s.files.Store.Reload(s.files.BootID, s.cur)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the checkpoint again failed", "then", "going on with the state in memory")
		return
	}
	s.setState(st)
}

func cloneState(s *checkpoint.State) *checkpoint.State {
	n := &checkpoint.State{Version: s.Version, BootID: s.BootID, Claims: make(map[string]checkpoint.Claim, len(s.Claims)+1)}
	for k, v := range s.Claims {
		n.Claims[k] = v
	}
	return n
}

// result is the kubelet's answer for a prepared claim: each allocated
// device with a CDI device of its own (the kubelet reports health per CDI
// device ID), and its published attributes as device metadata, so a
// container can read which EFAs it was given.
func (s *State) result(snap *inventory.Snapshot, c checkpoint.Claim) kubeletplugin.PrepareResult {
	var devs []kubeletplugin.Device
	seen := map[string]bool{}
	for _, d := range c.Devices {
		// The kubelet knows the allocated devices: a group once, not its
		// members; a shared EFA once per share.
		name := d.Device
		if d.Group != "" {
			name = d.Group
		}
		if seen[name+"/"+d.ShareID] {
			continue
		}
		seen[name+"/"+d.ShareID] = true
		dev := kubeletplugin.Device{
			Requests: []string{d.Request}, PoolName: s.node.Name, DeviceName: name,
			CDIDeviceIDs: []string{s.allocatedID(c.UID, d)},
		}
		if d.ShareID != "" {
			share := types.UID(d.ShareID)
			dev.ShareID = &share
		}
		if inv, ok := snap.Devices[name]; ok {
			dev.Metadata = &kubeletplugin.DeviceMetadata{Attributes: metadataAttributes(inv.Attributes)}
		}
		devs = append(devs, dev)
	}
	return kubeletplugin.PrepareResult{Devices: devs}
}
