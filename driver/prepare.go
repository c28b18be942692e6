package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/atomicfile"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// cdiRequests groups a claim's EFAs by request for its CDI spec: one CDI
// device per request, with the variables the checkpoint recorded for it. A
// subrequest ("gpu-efas/4") counts as its request: '/' cannot be in a CDI
// device name, and a container names requests.
func cdiRequests(c checkpoint.Claim) map[string]cdi.Request {
	out := map[string]cdi.Request{}
	for _, d := range c.Devices {
		r := baseRequest(d.Request)
		req := out[r]
		req.Devices = append(req.Devices, cdi.Device{Name: d.RDMAName, Uverbs: d.Uverbs, Major: d.Major, Minor: d.Minor})
		req.Env = c.Env[r]
		out[r] = req
	}
	return out
}

func baseRequest(r string) string {
	base, _, _ := strings.Cut(r, "/")
	return base
}

// devNumber is a character device's number as the checkpoint keeps it.
func devNumber(major, minor uint32) string { return fmt.Sprintf("%d:%d", major, minor) }

// batch gathers the changes a kubelet call makes to the checkpoint, so
// that the call saves it once (one fsync), however many claims it holds.
// Between begin and commit, p.state is the call's own copy: each claim
// sees those prepared or unprepared before it in the call.
type batch struct {
	base    *checkpoint.State // the state before the call, kept if the save fails
	changed map[string]bool   // claims recorded, changed or forgotten by the call
	added   []string          // claims recorded by the call: their specs go if the save fails
}

// begin starts a batch.
func (p *Plugin) begin() *batch {
	b := &batch{base: p.state, changed: map[string]bool{}}
	p.state = cloneState(p.state)
	return b
}

// put records a prepared claim in the call's state.
func (p *Plugin) put(b *batch, c checkpoint.Claim) {
	p.state.Claims[c.UID] = c
	b.changed[c.UID] = true
}

// commit saves the call's state if it changed. When the save fails, the
// state before the call stands and the specs of the claims the call
// recorded are removed again: not recorded, so not prepared.
func (p *Plugin) commit(b *batch) error {
	if len(b.changed) == 0 {
		// The State the checkpoint Store remembers: the next call's
		// Reload need not read the file.
		p.state = b.base
		return nil
	}
	if err := p.store.Save(p.state); err != nil {
		p.state = b.base
		for _, uid := range b.added {
			_ = p.cdi.Remove(uid)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// PrepareResourceClaims prepares each claim: a CDI spec holding only its
// EFAs' uverbs nodes (numbers read from sysfs now) and, where its
// configuration asks for it, the libfabric environment; recorded in the
// checkpoint before success is reported, all claims of the call in one
// save. A claim prepared already (the kubelet retries, or several pods
// share it) gets the same devices again, checked against its allocation
// and against sysfs. The time observed for a claim is its own work and the
// call's save.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	waited := p.Metrics.waited("prepare", ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloadState(ctx)
	call := make(map[string]*resourceapi.ResourceClaim, len(claims))
	for _, c := range claims {
		call[c.Namespace+"/"+c.Name] = c
	}
	logger := klog.FromContext(ctx)
	b := p.begin()
	took := make([]time.Duration, len(claims))
	for i, c := range claims {
		start := time.Now()
		res, err := p.prepare(ctx, b, c, call)
		took[i] = time.Since(start)
		res.Err = err
		out[c.UID] = res
	}
	start := time.Now()
	saveErr := p.commit(b)
	saved := time.Since(start)
	for i, c := range claims {
		res := out[c.UID]
		if saveErr != nil && b.changed[string(c.UID)] {
			res = kubeletplugin.PrepareResult{Err: saveErr}
		}
		if res.Err != nil {
			if e := storageError(res.Err); e != res.Err {
				res.Err = e
				p.kickStorageCheck()
			}
		}
		p.Metrics.observe("prepare", took[i]+saved, res.Err)
		// One line per claim at the default verbosity: which claim got
		// which EFAs (published and RDMA names), how long it took, and
		// how long the kubelet's call waited before (the helper's claim
		// reads, the calls before it).
		if res.Err != nil {
			res.Err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, res.Err)
			logger.Error(res.Err, "prepare failed", "claim", klog.KObj(c), "uid", c.UID, "duration", took[i]+saved, "waited", waited)
		} else {
			logger.Info("prepared", "claim", klog.KObj(c), "uid", c.UID, "devices", claimDevices(p.state.Claims[string(c.UID)]), "duration", took[i]+saved, "waited", waited)
		}
		out[c.UID] = res
	}
	return out, nil
}

// wanted is one EFA a claim's allocation gives: its request and, for a
// member of an allocated group device, the group.
type wanted struct {
	Request, Device, Group string
}

// allocated lists the EFAs of this node that the claim's allocation holds,
// group devices expanded into their members, in allocation order.
func (p *Plugin) allocated(c *resourceapi.ResourceClaim) ([]wanted, error) {
	if c.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	var out []wanted
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != p.cfg.Driver() {
			continue
		}
		if r.Pool != p.cfg.NodeName {
			return nil, fmt.Errorf("device %s is in pool %s, this node's pool is %s", r.Device, r.Pool, p.cfg.NodeName)
		}
		if members, ok := p.groups[r.Device]; ok {
			for _, m := range members {
				out = append(out, wanted{Request: r.Request, Device: m, Group: r.Device})
			}
			continue
		}
		out = append(out, wanted{Request: r.Request, Device: r.Device})
	}
	return out, nil
}

func (p *Plugin) prepare(ctx context.Context, b *batch, c *resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, error) {
	uid := string(c.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	want, err := p.allocated(c)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	if prev, ok := p.state.Claims[uid]; ok {
		return p.prepareAgain(ctx, b, prev, want)
	}
	if p.blocked != "" {
		return kubeletplugin.PrepareResult{}, errors.New(p.blocked)
	}
	held := p.held("")
	released := map[string]bool{}
	claim := checkpoint.Claim{UID: uid, Namespace: c.Namespace, Name: c.Name}
	r := sysfs.NewReader(p.sysfs)
	for _, w := range want {
		inv, ok := p.inventory[w.Device]
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
		if other, ok := held["pci:"+inv.PCIAddress]; ok && !p.released(ctx, other, released) {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is already prepared for claim %s", w.Device, p.describeClaim(ctx, other))
		}
		if other, ok := held["dev:"+num]; ok && !p.released(ctx, other, released) {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("device %s is %s (%s) now, a device number that containers of claim %s were given (the uverbs devices were numbered anew, an efa or ib_uverbs module reload): refused until that claim is unprepared", w.Device, cur.Verbs.Name, num, p.describeClaim(ctx, other))
		}
		held["pci:"+inv.PCIAddress], held["dev:"+num] = uid, uid
		if cur.RDMAName != inv.RDMAName || cur.Verbs.Name != inv.Uverbs {
			p.kickRescan()
		}
		claim.Devices = append(claim.Devices, checkpoint.PreparedDevice{
			Request: w.Request, Pool: p.cfg.NodeName, Device: w.Device, RDMAName: cur.RDMAName, Uverbs: cur.Verbs.Name,
			PCIAddress: inv.PCIAddress, Major: cur.Verbs.Major, Minor: cur.Verbs.Minor, Group: w.Group,
		})
	}
	env, err := p.environment(ctx, c, claim, call)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	claim.Env = env
	if len(claim.Devices) > 0 {
		ids, err := p.cdi.Write(uid, cdiRequests(claim))
		if err != nil {
			return kubeletplugin.PrepareResult{}, err
		}
		claim.CDIDeviceIDs = ids
	}
	p.put(b, claim)
	b.added = append(b.added, uid)
	return p.result(claim), nil
}

// prepareAgain answers a prepare of a claim prepared already: the same
// devices, provided the claim's allocation still names them, with the
// device numbers checked against sysfs and the spec written again if it
// was lost or the numbers changed.
func (p *Plugin) prepareAgain(ctx context.Context, b *batch, prev checkpoint.Claim, want []wanted) (kubeletplugin.PrepareResult, error) {
	var had []wanted
	for _, d := range prev.Devices {
		had = append(had, wanted{Request: d.Request, Device: d.Device, Group: d.Group})
	}
	sorted := func(ws []wanted) []wanted {
		return slices.SortedFunc(slices.Values(ws), func(a, b wanted) int {
			return cmp.Or(strings.Compare(a.Request, b.Request), strings.Compare(a.Device, b.Device), strings.Compare(a.Group, b.Group))
		})
	}
	if !slices.Equal(sorted(had), sorted(want)) {
		return kubeletplugin.PrepareResult{}, fmt.Errorf("prepared for %s, but now allocated %s: unprepare it first", describe(had), describe(want))
	}
	claim, _, err := p.refreshIn(ctx, b, prev)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	return p.result(claim), nil
}

func describe(ws []wanted) string {
	if len(ws) == 0 {
		return "no EFA of this node"
	}
	var s []string
	for _, w := range ws {
		s = append(s, w.Request+":"+w.Device)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// readCurrent reads an EFA's RDMA device and uverbs device from sysfs now.
func readCurrent(r *sysfs.Reader, pciAddress string) (efa.Current, error) {
	a, err := pcie.ParseAddress(pciAddress)
	if err != nil {
		return efa.Current{}, err
	}
	return efa.ReadCurrent(r, a)
}

// renumbering is one EFA of a prepared claim found with another RDMA name
// or uverbs device than its spec gave (a module reload numbered them anew).
type renumbering struct {
	Device   string // published name
	Was, Now string // "rdmap79s0 uverbs0 231:192"
}

// refresh checks a prepared claim's EFAs against sysfs: an EFA whose RDMA
// name or uverbs device changed (a module reload numbers them anew) gets
// the new values in its spec and the checkpoint, and its old device
// number is kept as stale, held by the claim, because containers started
// before still hold it. The spec is written again when it is missing or
// changed. An EFA that cannot be read keeps its record (and so its
// numbers stay held): it is reported, not guessed at. A change is saved
// at once. It returns what was renumbered.
func (p *Plugin) refresh(ctx context.Context, c checkpoint.Claim) (checkpoint.Claim, []renumbering, error) {
	b := p.begin()
	c, moved, err := p.refreshIn(ctx, b, c)
	if serr := p.commit(b); serr != nil && err == nil {
		err = serr
	}
	return c, moved, err
}

// refreshIn is refresh within a kubelet call's batch: a change is saved
// with the call's other changes.
func (p *Plugin) refreshIn(ctx context.Context, b *batch, c checkpoint.Claim) (checkpoint.Claim, []renumbering, error) {
	logger := klog.FromContext(ctx)
	r := sysfs.NewReader(p.sysfs)
	var moved []renumbering
	devs := slices.Clone(c.Devices)
	for i, d := range devs {
		cur, err := readCurrent(r, d.PCIAddress)
		if err != nil {
			logger.Error(err, "Prepared EFA unreadable; its record is kept", "claim", klog.KRef(c.Namespace, c.Name), "device", d.Device)
			continue
		}
		if cur.RDMAName == d.RDMAName && cur.Verbs.Name == d.Uverbs && cur.Verbs.Major == d.Major && cur.Verbs.Minor == d.Minor {
			continue
		}
		old := devNumber(d.Major, d.Minor)
		m := renumbering{Device: d.Device, Was: d.RDMAName + " " + d.Uverbs + " " + old,
			Now: cur.RDMAName + " " + cur.Verbs.Name + " " + devNumber(cur.Verbs.Major, cur.Verbs.Minor)}
		logger.Error(nil, "EFA of a prepared claim renumbered (efa or ib_uverbs module reloaded?); CDI spec corrected, containers started before hold the old device number and may reach another EFA: restart them",
			"claim", klog.KRef(c.Namespace, c.Name), "device", d.Device, "was", m.Was, "now", m.Now)
		d.Stale = slices.Clone(d.Stale)
		if !slices.Contains(d.Stale, old) {
			d.Stale = append(d.Stale, old)
		}
		d.RDMAName, d.Uverbs, d.Major, d.Minor = cur.RDMAName, cur.Verbs.Name, cur.Verbs.Major, cur.Verbs.Minor
		devs[i] = d
		moved = append(moved, m)
		p.Metrics.Renumbered.Inc()
		p.kickRescan()
	}
	changed := len(moved) > 0
	if changed {
		c.Devices = devs
		held := p.held(c.UID)
		for _, d := range c.Devices {
			if other, ok := held["dev:"+devNumber(d.Major, d.Minor)]; ok {
				o := p.state.Claims[other]
				logger.Error(nil, "After the renumbering, containers of two claims hold one device number: restart the pods of both", "claim", klog.KRef(c.Namespace, c.Name), "other", klog.KRef(o.Namespace, o.Name), "device", d.Uverbs)
			}
		}
		if c.Env != nil {
			// FI_EFA_IFACE names RDMA devices, which a reload may
			// rename too. A new map: the old one is the saved state's.
			reqs, env := cdiRequests(c), make(map[string][]string, len(c.Env))
			for req, vars := range c.Env {
				env[req] = withIface(vars, reqs[req].Devices)
			}
			c.Env = env
		}
	}
	ok, err := p.cdi.Exists(c.UID)
	if err == nil && !ok && len(c.Devices) > 0 {
		logger.Info("CDI spec written again (the CDI directory lost it)", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID)
		p.Metrics.SpecsRestored.Inc()
	}
	if len(c.Devices) > 0 && (changed || err != nil || !ok) {
		ids, err := p.cdi.Write(c.UID, cdiRequests(c))
		if err != nil {
			return c, moved, err
		}
		c.CDIDeviceIDs = ids
	}
	if changed {
		p.put(b, c)
	}
	return c, moved, nil
}

// withIface replaces FI_EFA_IFACE's value in vars, if it is there.
func withIface(vars []string, devs []cdi.Device) []string {
	out := slices.Clone(vars)
	for i, v := range out {
		if strings.HasPrefix(v, cdi.EnvIface+"=") {
			out[i] = cdi.EnvIface + "=" + cdi.Iface(devs)
		}
	}
	return out
}

// describeClaim names a prepared claim for a refusal: namespace/name, its
// UID, and the pods that use it where the kubelet says.
func (p *Plugin) describeClaim(ctx context.Context, uid string) string {
	c, ok := p.state.Claims[uid]
	if !ok {
		return uid
	}
	return c.Namespace + "/" + c.Name + " (" + uid + ")" + p.claimUsers(ctx, c.Namespace, c.Name)
}

// held maps what prepared claims hold to the claim holding it, leaving out
// the claim except: "pci:<address>" for each EFA and "dev:<major>:<minor>"
// for each device number its containers may hold, stale ones included.
func (p *Plugin) held(except string) map[string]string {
	out := map[string]string{}
	for uid, c := range p.state.Claims {
		if uid == except {
			continue
		}
		for _, d := range c.Devices {
			out["pci:"+d.PCIAddress] = uid
			out["dev:"+devNumber(d.Major, d.Minor)] = uid
			for _, s := range d.Stale {
				out["dev:"+s] = uid
			}
		}
	}
	return out
}

// released tells whether a claim that is still prepared here no longer
// holds its EFAs in the API: the claim is gone (or is another claim of the
// same name), or is no longer allocated any of the devices it was prepared
// with. That happens when its pod was deleted without waiting for the
// kubelet (grace period 0, or --force): the claim controller frees the
// claim at once, the scheduler gives the EFAs to the next pod, and the
// kubelet may prepare that pod's claim before it unprepares the old one.
// Kubernetes treats such EFAs as free, so efakit does too, and says so;
// the old claim's record and spec stay until the kubelet unprepares it.
// Without an API client, or when the API cannot tell, the claim holds its
// EFAs (the prepare is refused, and the kubelet retries). Answers are kept
// in seen for one kubelet call.
func (p *Plugin) released(ctx context.Context, uid string, seen map[string]bool) bool {
	if r, ok := seen[uid]; ok {
		return r
	}
	prev, ok := p.state.Claims[uid]
	if !ok || p.kube == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cur, err := p.kube.ResourceV1().ResourceClaims(prev.Namespace).Get(ctx, prev.Name, metav1.GetOptions{})
	var why string
	switch {
	case apierrors.IsNotFound(err):
		why = "the claim was deleted"
	case err != nil:
		klog.FromContext(ctx).Error(err, "reading a prepared claim to see whether it still holds its EFAs; it does until the kubelet unprepares it", "claim", klog.KRef(prev.Namespace, prev.Name))
	case string(cur.UID) != uid:
		why = "the claim was deleted and another made under its name"
	case cur.Status.Allocation == nil:
		why = "the claim was deallocated"
	default:
		holds := map[string]bool{}
		for _, d := range prev.Devices {
			holds[d.Device], holds[d.Group] = true, true
		}
		why = "the claim is allocated other devices"
		for _, r := range cur.Status.Allocation.Devices.Results {
			if r.Driver == p.cfg.Driver() && r.Pool == p.cfg.NodeName && holds[r.Device] {
				why = ""
			}
		}
	}
	seen[uid] = why != ""
	if why != "" {
		klog.FromContext(ctx).Info("EFAs of a claim the kubelet has not unprepared yet are handed on: "+why+" (its pod was deleted without waiting for the kubelet); its containers may still run until the kubelet stops them",
			"claim", klog.KRef(prev.Namespace, prev.Name), "uid", uid)
	}
	return seen[uid]
}

// reloadState reads the checkpoint again before a kubelet call if it
// changed: during a rolling update the other plugin pod (the helper's file
// lock lets one serve at a time) may have prepared or unprepared claims
// since this one loaded it. Unchanged since this plugin last read or wrote
// it (one stat tells), it is not read. On a read error the state in memory
// stands.
func (p *Plugin) reloadState(ctx context.Context) {
	st, err := p.store.Reload(p.bootID, p.state)
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

// UnprepareResourceClaims forgets each claim and removes its CDI spec. A
// claim that is not prepared is not an error: the kubelet may ask twice.
// The checkpoint is saved once for the call, before any spec is removed: a
// crash in between leaves specs of no claim, which the next start removes,
// never a claim the kubelet unprepared whose spec comes back.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	waited := p.Metrics.waited("unprepare", ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloadState(ctx)
	logger := klog.FromContext(ctx)
	b := p.begin()
	took := make([]time.Duration, len(claims))
	devices := make([][]string, len(claims))
	for i, c := range claims {
		start := time.Now()
		devices[i] = claimDevices(p.state.Claims[string(c.UID)])
		out[c.UID] = p.forget(b, string(c.UID))
		took[i] = time.Since(start)
	}
	start := time.Now()
	saveErr := p.commit(b)
	saved := time.Since(start)
	for i, c := range claims {
		start := time.Now()
		err := out[c.UID]
		switch {
		case err != nil:
		case saveErr != nil && b.changed[string(c.UID)]:
			err = saveErr
		default:
			err = p.cdi.Remove(string(c.UID))
		}
		d := took[i] + saved + time.Since(start)
		p.Metrics.observe("unprepare", d, err)
		if err != nil {
			err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			logger.Error(err, "unprepare failed", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID, "devices", devices[i], "duration", d, "waited", waited)
		} else {
			// devices is empty for a claim that was not prepared here.
			logger.Info("unprepared", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID, "devices", devices[i], "duration", d, "waited", waited)
		}
		out[c.UID] = err
	}
	return out, nil
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

// forget takes a claim out of the call's state; its spec is removed once
// the state is saved.
func (p *Plugin) forget(b *batch, uid string) error {
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return err
	}
	if _, ok := p.state.Claims[uid]; ok {
		delete(p.state.Claims, uid)
		b.changed[uid] = true
	}
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

// metadataFileOps are the file operations the kubelet plugin helper writes
// each claim's device metadata with (a file in the data directory and a
// CDI spec, per request): its own, but without its two fsyncs per file,
// which made a call's fsyncs grow with its claims. These files need none,
// for the reasons a spec needs none (see cdi.Writer): a rename shows them
// whole, the page cache outlives a plugin crash, and after a reboot the
// plugin's start removes the metadata of every claim of the boot before,
// which the kubelet prepares again. sync, when set, replaces fsync (there
// is none; tests count them through it).
func metadataFileOps(sync func(*os.File) error) kubeletplugin.MetadataFileOperations {
	return kubeletplugin.MetadataFileOperations{WriteFile: func(name string, data []byte, perm os.FileMode) error {
		return atomicfile.Write(name, data, atomicfile.Options{Perm: perm, Durability: atomicfile.SyncNone, Sync: sync})
	}}
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
