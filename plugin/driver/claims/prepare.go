package claims

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimenv"
	"github.com/efakit/efakit/plugin/driver/inventory"
)

// cdiRequests groups a claim's EFAs by request for its CDI spec: one CDI
// device per allocated device of the request (a group once, a shared EFA
// once per share), whose ID the kubelet gets for it, with the variables
// the checkpoint recorded for the request. A subrequest
// ("gpu-efas/4") counts as its request: '/' cannot be in a CDI device
// name, and a container names requests.
func cdiRequests(c checkpoint.Claim) map[string]cdi.Request {
	out := map[string]cdi.Request{}
	for _, a := range c.Allocated() {
		r := claimenv.BaseRequest(a.Request)
		req := out[r]
		ca := cdi.Allocated{Name: cdiName(a)}
		for _, d := range a.EFAs {
			dev := cdi.Device{Name: d.RDMAName, Uverbs: d.Uverbs, Major: d.Major, Minor: d.Minor}
			// Two shares of one EFA in one request are one node.
			if !slices.Contains(req.Devices, dev) {
				req.Devices = append(req.Devices, dev)
			}
			ca.Devices = append(ca.Devices, dev)
		}
		req.Allocated = append(req.Allocated, ca)
		req.Env = c.Env[r]
		// A claim prepared by an efakit that gave the kubelet one CDI
		// device per request keeps it: its containers start with it.
		_, req.Whole = c.CDIDeviceIDs[r]
		out[r] = req
	}
	return out
}

// cdiName names an allocated device's CDI device within its claim and
// request: the device (an EFA or a group), a share's ID after '_'. The
// kubelet reports health under its CDI device ID.
func cdiName(a checkpoint.Allocated) string {
	if a.ShareID != "" {
		return a.Name + "_" + a.ShareID
	}
	return a.Name
}

// allocatedID is the fully qualified CDI device ID of an allocated device
// of claim uid.
func (s *State) allocatedID(uid string, a checkpoint.Allocated) string {
	return s.files.CDI.ID(cdi.AllocatedName(uid, claimenv.BaseRequest(a.Request), cdiName(a)))
}

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

// setState makes st the claim state, saved or loaded: the one the
// readers see (Committed). A batch's own copy is never set here, so they
// never see a claim before its save. Called with s.mu held, or before
// the State is shared.
func (s *State) setState(st *checkpoint.State) {
	s.cur = st
	s.committed.Store(st)
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
			res.Err = s.storageError(res.Err)
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
		if err := s.take(held, uid, w, inv.PCIAddress, cur, rd); err != nil {
			return kubeletplugin.PrepareResult{}, err
		}
		if cur.RDMAName != inv.RDMAName || cur.Verbs.Name != inv.Uverbs {
			s.deps.AskRescan()
		}
		claim.Devices = append(claim.Devices, checkpoint.PreparedDevice{
			Request: w.Request, Pool: s.node.Name, Device: w.Device, RDMAName: cur.RDMAName, Uverbs: cur.Verbs.Name,
			PCIAddress: inv.PCIAddress, Major: cur.Verbs.Major, Minor: cur.Verbs.Minor, Group: w.Group,
			ShareID: w.ShareID, Shares: w.Shares,
		})
	}
	ec := s.envCall(call, rd)
	devices := map[string][]cdi.Device{}
	for r, req := range cdiRequests(claim) {
		devices[r] = req.Devices
	}
	env, err := ec.Environment(c, devices)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	claim.Env = env
	if classes := ec.ExtendedClasses(c); len(classes) > 0 {
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

// result is the kubelet's answer for a prepared claim: each allocated
// device (a group once, not its members; a shared EFA once per share)
// with a CDI device of its own (the kubelet reports health per CDI device
// ID), and its published attributes as device metadata, so a container
// can read which EFAs it was given.
func (s *State) result(snap *inventory.Snapshot, c checkpoint.Claim) kubeletplugin.PrepareResult {
	var devs []kubeletplugin.Device
	for _, a := range c.Allocated() {
		dev := kubeletplugin.Device{
			Requests: []string{a.Request}, PoolName: s.node.Name, DeviceName: a.Name,
			CDIDeviceIDs: []string{s.allocatedID(c.UID, a)},
		}
		if a.ShareID != "" {
			share := types.UID(a.ShareID)
			dev.ShareID = &share
		}
		if inv, ok := snap.Devices[a.Name]; ok {
			dev.Metadata = &kubeletplugin.DeviceMetadata{Attributes: metadataAttributes(inv.Attributes)}
		}
		devs = append(devs, dev)
	}
	return kubeletplugin.PrepareResult{Devices: devs}
}

// claimDevices names a prepared claim's EFAs for the log: "published
// name=RDMA name", a group's members after the group's name.
func claimDevices(c checkpoint.Claim) []string {
	out := make([]string, 0, len(c.Devices))
	for _, d := range c.Devices {
		n := d.Device + "=" + d.RDMAName
		if d.Group != "" {
			n = d.Group + "/" + n
		}
		out = append(out, n)
	}
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
