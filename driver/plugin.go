package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/topology"
)

// Publisher publishes the node's devices: kubeletplugin.Helper in the
// plugin, a recorder in tests.
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Plugin is the DRA kubelet plugin's logic: it scans sysfs, publishes the
// EFAs, and prepares claims through CDI specs and a checkpoint. It
// implements kubeletplugin.DRAPlugin.
type Plugin struct {
	cfg    Config
	sysfs  fs.ReadLinkFS
	names  *pcie.Names
	cdi    *cdi.Writer
	store  *checkpoint.Store
	bootID string
	// Stop is called on a fatal background error (HandleError).
	Stop func(err error)
	// HealthInterval is how often health is re-checked and re-sent (the
	// kubelet treats a device as unknown after 30 s without a report).
	HealthInterval time.Duration
	// Precheck, when set, runs before each scan and returns why the plugin
	// must publish nothing ("" when it may publish): Serve uses it to stand
	// aside on a node where the EFA device plugin owns the EFAs.
	Metrics *Metrics

	Precheck func(ctx context.Context) string

	mu        sync.Mutex
	blocked   string // why nothing is published; "" normally
	pub       Publisher
	current   *resourceslice.DriverResources // from the last scan
	published *resourceslice.DriverResources // last published
	inventory map[string]inventoryDevice     // by published device name
	groups    map[string][]string            // group device name -> member device names
	health    map[string]deviceHealth        // by published device name
	state     *checkpoint.State
}

// inventoryDevice is what Prepare needs of a published EFA.
type inventoryDevice struct {
	RDMAName   string
	Uverbs     string
	Major      uint32
	Minor      uint32
	PCIAddress string
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

type deviceHealth struct {
	status  kubeletplugin.HealthStatus
	message string
}

// PluginOptions are what NewPlugin needs.
type PluginOptions struct {
	Config Config
	// SysfsRoot is the sysfs to scan (the host's /sys, mounted read-only).
	SysfsRoot fs.ReadLinkFS
	Names     *pcie.Names
	CDI       *cdi.Writer
	Store     *checkpoint.Store
	// BootID is the kernel's boot ID: state from another boot is dropped.
	BootID string
}

// NewPlugin restores the checkpoint: claims prepared before a plugin
// restart stay prepared, and a CDI spec the restart or a tmpfs wipe lost is
// written again. A corrupt checkpoint is reported in the returned error
// and the plugin starts empty rather than crash-looping; the returned
// Plugin is usable whenever it is not nil.
func NewPlugin(ctx context.Context, o PluginOptions) (*Plugin, error) {
	p := &Plugin{
		cfg: o.Config, sysfs: o.SysfsRoot, names: o.Names, cdi: o.CDI, store: o.Store, bootID: o.BootID,
		HealthInterval: 10 * time.Second, Metrics: NewMetrics(),
		inventory: map[string]inventoryDevice{}, health: map[string]deviceHealth{},
	}
	logger := klog.FromContext(ctx)
	st, loadErr := p.store.Load(o.BootID)
	if st == nil {
		return nil, fmt.Errorf("checkpoint: %w", loadErr)
	}
	p.state = st
	var errs []error
	if loadErr != nil {
		errs = append(errs, fmt.Errorf("checkpoint: %w", loadErr))
	}
	// Claims from before a reboot: the kubelet prepares again, and their
	// specs (if the CDI directory survived) describe nothing.
	for _, c := range st.Dropped {
		if err := p.cdi.Remove(c.UID); err != nil {
			errs = append(errs, fmt.Errorf("claim %s from before the reboot: %w", c.UID, err))
		}
	}
	if len(st.Dropped) > 0 {
		logger.Info("dropped claims prepared before the node rebooted", "count", len(st.Dropped))
	}
	for uid, c := range st.Claims {
		if len(c.Devices) == 0 {
			continue
		}
		ok, err := p.cdi.Exists(uid)
		if err == nil && ok {
			continue
		}
		if _, err := p.cdi.Write(uid, cdiRequests(c.Devices)); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s (%s): write CDI spec again: %w", c.Namespace, c.Name, uid, err))
			continue
		}
		logger.Info("CDI spec written again after restart", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
	}
	return p, errors.Join(errs...)
}

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

// SetPublisher sets where Rescan publishes; the helper exists only after
// kubeletplugin.Start, which needs the Plugin first.
func (p *Plugin) SetPublisher(pub Publisher) {
	p.mu.Lock()
	p.pub = pub
	p.published = nil
	p.mu.Unlock()
}

// Rescan reads sysfs again, updates the inventory and health, and publishes
// only when the devices changed, so a node in a steady state makes no API
// writes. It reports whether it published.
func (p *Plugin) Rescan(ctx context.Context) (bool, error) {
	start := time.Now()
	topo, scanErr := topology.Scan(p.sysfs)
	res, buildErr := Resources(topo, p.names, p.cfg)
	inv := map[string]inventoryDevice{}
	healthy := map[string]deviceHealth{}
	for _, d := range topo.Of(topology.KindEFA) {
		name := DeviceName(d.PCI.Address)
		h := deviceHealth{status: kubeletplugin.HealthStatusHealthy}
		switch {
		case d.PCI.Driver != "efa":
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, fmt.Sprintf("driver %q, not efa", d.PCI.Driver)}
		case d.EFA.Verbs == nil:
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "no uverbs device"}
		case len(d.EFA.Ports) == 0 || d.EFA.Ports[0].State != "ACTIVE":
			state := "none"
			if len(d.EFA.Ports) > 0 {
				state = d.EFA.Ports[0].State
			}
			h = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "port " + state}
		}
		healthy[name] = h
		if d.EFA.Verbs == nil {
			continue
		}
		dev, err := EFADevice(topo, d, p.names, p.cfg)
		if err != nil {
			continue
		}
		inv[name] = inventoryDevice{RDMAName: d.Name, Uverbs: d.EFA.Verbs.Name, Major: d.EFA.Verbs.Major, Minor: d.EFA.Verbs.Minor,
			PCIAddress: d.PCI.Address.String(), Attributes: dev.Attributes}
	}
	groups := map[string][]string{}
	var groupAttrs = map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if p.cfg.Groups != GroupsNone {
		var members []*topology.Device
		for _, d := range topo.Of(topology.KindEFA) {
			if _, ok := inv[DeviceName(d.PCI.Address)]; ok {
				members = append(members, d)
			}
		}
		for _, g := range Groups(topo, members).List {
			name := GroupDeviceName(g.Root)
			for _, m := range g.Members {
				groups[name] = append(groups[name], DeviceName(m.PCI.Address))
			}
			if dev, err := GroupDevice(topo, g, p.cfg); err == nil {
				groupAttrs[name] = dev.Attributes
			}
		}
	}
	err := errors.Join(scanErr, buildErr)
	p.Metrics.observeScan(time.Since(start), err, len(inv))

	p.mu.Lock()
	// A device that was there and is gone is unhealthy until it returns.
	for name := range p.health {
		if _, ok := healthy[name]; !ok {
			healthy[name] = deviceHealth{kubeletplugin.HealthStatusUnhealthy, "device gone from sysfs"}
		}
	}
	p.inventory, p.health, p.groups = inv, healthy, groups
	for name, attrs := range groupAttrs {
		p.inventory[name] = inventoryDevice{Attributes: attrs}
	}
	p.current = &res
	p.mu.Unlock()
	published, perr := p.Publish(ctx)
	return published, errors.Join(err, perr)
}

// Publish publishes the devices of the last scan when they differ from what
// was published last.
func (p *Plugin) Publish(ctx context.Context) (bool, error) {
	p.mu.Lock()
	pub, cur := p.pub, p.current
	if p.blocked != "" {
		// No pool at all: the controller removes the slices it published.
		cur = &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	}
	same := cur != nil && p.published != nil && apiequality.Semantic.DeepEqual(*p.published, *cur)
	p.mu.Unlock()
	if pub == nil || cur == nil || same {
		return false, nil
	}
	if err := pub.PublishResources(ctx, *cur); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	p.mu.Lock()
	p.published = cur.DeepCopy()
	p.mu.Unlock()
	p.Metrics.Published.Add(1)
	return true, nil
}

// DeviceCount is the number of EFAs in the inventory.
func (p *Plugin) DeviceCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inventory)
}

// Recheck runs Precheck (an API read, so it runs with the periodic rescans,
// not with the health checks) and remembers why the plugin must publish
// nothing.
func (p *Plugin) Recheck(ctx context.Context) {
	if p.Precheck == nil {
		return
	}
	reason := p.Precheck(ctx)
	p.mu.Lock()
	if reason != p.blocked && reason != "" {
		klog.FromContext(ctx).Error(errors.New(reason), "publishing no devices")
	}
	p.blocked = reason
	p.mu.Unlock()
}

// Run rescans every interval and whenever rescan receives, until ctx ends.
func (p *Plugin) Run(ctx context.Context, interval time.Duration, rescan <-chan struct{}) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rescan:
		}
		p.Recheck(ctx)
		if published, err := p.Rescan(ctx); err != nil {
			logger.Error(err, "rescan")
		} else if published {
			logger.Info("published changed devices")
		}
	}
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

// HandleError logs background errors (publishing); a fatal one stops the
// plugin through Stop.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		// The API server dropped what it does not know: in mixed mode the
		// counters that keep a group and its members apart. Publishing on
		// would allow double allocation, so the plugin stops.
		err = fmt.Errorf("the API server dropped fields of the published slices (disabled features: %v); group mode %q needs DRAPartitionableDevices: run with --groups=none or exclusive: %w",
			dropped.DisabledFeatures(), p.cfg.Groups, err)
		klog.FromContext(ctx).Error(err, msg)
		if p.Stop != nil {
			p.Stop(err)
		}
		return
	}
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && p.Stop != nil {
		p.Stop(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus sends the health of every device now, then again on
// every HealthInterval (re-scanning sysfs), until ctx ends: a device that
// disappears, loses its driver, leaves ACTIVE or loses its uverbs node is
// reported Unhealthy.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(p.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- p.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = p.Rescan(ctx)
		}
	}
}

func (p *Plugin) healthReport() kubeletplugin.DeviceHealthReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	names := make([]string, 0, len(p.health))
	for n := range p.health {
		names = append(names, n)
	}
	sort.Strings(names)
	var r kubeletplugin.DeviceHealthReport
	for _, n := range names {
		h := p.health[n]
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{
			PoolName: p.cfg.NodeName, DeviceName: n, Health: h.status, Message: h.message,
			LastUpdated: now, HealthCheckTimeout: 3 * p.HealthInterval,
		})
	}
	return r
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
