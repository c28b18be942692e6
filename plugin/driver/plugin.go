package driver

import (
	"cmp"
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claims"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/traffic"
)

// Publisher publishes the node's devices: a publishing.Slices in the plugin,
// a recorder in tests.
type Publisher = publishing.Target

// PodLister lists the node's pods with the claims their containers use:
// the kubelet's PodResources API (podresources.Client) in the plugin.
type PodLister = claims.PodLister

// Plugin is the DRA kubelet plugin: the adapter between the kubelet plugin
// helper (kubeletplugin.DRAPlugin) and the parts that own the plugin's
// state, each with one owner:
//   - the inventory (driver/inventory): an immutable snapshot of the last
//     scan, replaced whole by the one goroutine that scans (Run);
//   - the claim state (driver/claims): the prepared claims, their CDI
//     specs and the checkpoint, behind the one lock a prepare takes;
//   - publishing (driver/publishing.Publisher): what was published and
//     what the API server refused;
//   - the owner check (driver/owners.Gate): whether to stand aside.
//
// Publishing, health, metrics and the claims' status read the snapshots
// and never take the claim state's lock, so none of them waits behind a
// prepare's disk writes. The Plugin's goroutines are started and stopped
// by Serve (see run.go), never by the Plugin itself.
type Plugin struct {
	cfg    resources.Config
	sysfs  fs.ReadLinkFS
	proc   fs.FS // for the GPUDirect judgement; nil for none
	inv    *inventory.Holder
	claims *claims.State
	pub    *publishing.Publisher
	gate   *owners.Gate
	// rescans are the scans asked for, with their reasons, that Run has
	// yet to make.
	rescans rescanQueue
	// scanMu makes the scans (and owner checks) one at a time, each
	// replacing the snapshot the last one stored; held across sysfs reads
	// only, never by a reader.
	scanMu sync.Mutex
	ops    operations
}

// operations are the Plugin's outputs beside its API: set by NewPlugin,
// never changed after.
type operations struct {
	metrics *metrics.Metrics
	// efa exports the EFAs' counters in metrics.Registry.
	efa *metrics.EFA
	// events records health changes, standing aside and failed publishes
	// as Events on the Node; nil records nothing.
	events *events.Recorder
	// healthInterval is how often health is re-checked and re-sent (the
	// kubelet treats a device as unknown after 30 s without a report).
	healthInterval time.Duration
	// grader keeps each EFA's samples for its health grade; the scans
	// use it, one at a time (scanMu).
	grader *health.Tracker
	// status writes prepared claims' status.devices (its Run is the run's
	// goroutine); nil without an API client.
	status *claimstatus.Writer
	// traffic keeps when each prepared device last carried RDMA traffic.
	traffic *traffic.Tracker
}

// PluginOptions are what NewPlugin needs.
type PluginOptions struct {
	Config resources.Config
	// SysfsRoot is the sysfs to scan (the host's /sys, mounted read-only).
	SysfsRoot fs.ReadLinkFS
	// ProcRoot is the proc file system the GPUDirect judgement reads the
	// NVIDIA driver's parameters and the kernel release from (nil: none,
	// and the facts they give are unknown).
	ProcRoot fs.FS
	CDI      *cdi.Writer
	Store    *checkpoint.Store
	// BootID is the kernel's boot ID: state from another boot is dropped.
	BootID string
	// KubeClient reads a prepared claim whose EFAs another claim asks for,
	// to hand them over when the first claim's pod was deleted at once
	// (optional: without it such a prepare is refused until the kubelet
	// unprepares the first claim).
	KubeClient kubernetes.Interface
	// StatusClient writes prepared claims' status.devices (optional:
	// without it none are written).
	StatusClient kubernetes.Interface
	// Pods lists which containers of the node's pods use which claims
	// (optional: without it a claim asking for the libfabric environment
	// is refused, and messages name claims without their pods).
	Pods PodLister
	// DataDir is the plugin's data directory (/var/lib/kubelet/plugins/
	// <driver>): restore takes its lock file, and writes again the
	// device-metadata specs of the files kept there. "" for neither.
	DataDir string
	// Hooks are the plugin's outputs and callbacks beside its API.
	Hooks
	// Health is how the devices' health is checked.
	Health HealthOptions
}

// HealthOptions are how the devices' health is checked.
type HealthOptions struct {
	// Interval is how often health is re-checked (10 s when 0).
	Interval time.Duration
	// Policy grades the devices' health (health.DefaultPolicy when its
	// Window is 0).
	Policy health.Policy
	// IdleAfter is how long a prepared device may carry no RDMA traffic
	// before its claim's TrafficSeen condition is False (0: not judged).
	IdleAfter time.Duration
}

// Hooks are what the plugin reports to and calls, each optional.
type Hooks struct {
	// Events records on the Node (nil for none).
	Events *events.Recorder
	// Stop is called on a fatal background error (nil for none).
	Stop func(err error)
	// Precheck says whether another owner holds the EFAs (nil for none).
	Precheck owners.Check
	// Spawn starts a goroutine the Plugin needs (nil: a go statement).
	Spawn func(func())
}

// NewPlugin restores the claim state from the checkpoint (claims.Load). A
// corrupt checkpoint is reported in the returned error and the plugin
// starts empty rather than crash-looping; the returned Plugin is usable
// whenever it is not nil. A checkpoint of a newer format (a rollback)
// gives a nil Plugin and the error: starting empty would forget what is
// prepared. Close releases what it holds when Run never ran.
func NewPlugin(ctx context.Context, o PluginOptions) (*Plugin, error) {
	p := &Plugin{cfg: o.Config, sysfs: o.SysfsRoot, proc: o.ProcRoot, inv: inventory.NewHolder(), rescans: newRescanQueue(),
		ops: operations{metrics: metrics.New(), events: o.Events, healthInterval: cmp.Or(o.Health.Interval, 10*time.Second)}}
	policy := o.Health.Policy
	if policy.Window == 0 {
		policy = health.DefaultPolicy()
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	p.ops.grader = health.NewTracker(policy)
	trafficFile := ""
	if o.DataDir != "" {
		trafficFile = filepath.Join(o.DataDir, "traffic.json")
	}
	var trafficErr error
	p.ops.traffic, trafficErr = traffic.New(o.Health.IdleAfter, trafficFile)
	if trafficErr != nil {
		klog.FromContext(ctx).Error(trafficErr, "Reading the claims' traffic state", "then", "their devices are judged from now on")
	}
	p.ops.status = claimstatus.New(claimstatus.Options{Client: o.StatusClient, DriverName: o.Config.Driver(), Pool: o.Config.NodeName,
		Observe: func(out claimstatus.Outcome) { p.ops.metrics.ClaimStatus.WithLabelValues(string(out)).Inc() }})
	p.pub = publishing.NewPublisher(publishing.PublisherOptions{Config: o.Config, Metrics: p.ops.metrics, Events: o.Events,
		Stop: o.Stop, Spawn: o.Spawn, AskRescan: func() { p.askRescan(rescanAPI) }})
	p.gate = owners.NewGate(o.Precheck, owners.GateOptions{Metrics: p.ops.metrics, Events: o.Events,
		AskAfter: func(d time.Duration) { p.rescans.AddAfter(rescanOwnerWait, d) }})
	st, err := claims.Load(ctx,
		claims.Files{CDI: o.CDI, Store: o.Store, BootID: o.BootID, DataDir: o.DataDir, Sysfs: o.SysfsRoot},
		claims.Node{Driver: o.Config.Driver(), Name: o.Config.NodeName},
		claims.Deps{Kube: o.KubeClient, Pods: o.Pods, Metrics: p.ops.metrics, Events: o.Events, Status: p.ops.status, Traffic: p.ops.traffic,
			AskRescan: func() { p.askRescan(rescanPrepare) }})
	if st == nil {
		p.Close()
		return nil, err
	}
	p.claims = st
	p.ops.efa = metrics.NewEFA(o.SysfsRoot, func() []metrics.Target { return p.claims.Targets(p.inv.Load()) })
	p.ops.metrics.Registry.MustRegister(p.ops.efa)
	return p, err
}

// Close stops the rescan queue, which Run also does when it ends.
func (p *Plugin) Close() { p.rescans.ShutDown() }

// PrepareResourceClaims prepares the claims on the inventory as it is now
// (claims.State.Prepare); the claim state's lock is the only one it takes.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, cs []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := p.claims.Prepare(ctx, p.inv.Load(), cs)
	// Saved first, then checked against the newest snapshot: a scan that
	// stored its snapshot during the call did not see these claims (it
	// stores first, then checks; see Rescan), so one of the two asks for
	// the correction of a renumbered EFA.
	if p.claims.Renumbered(ctx, p.inv.Load()) {
		p.askRescan(rescanPrepare)
	}
	return out, nil
}

// UnprepareResourceClaims unprepares the claims (claims.State.Unprepare).
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, cs []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return p.claims.Unprepare(ctx, cs), nil
}

// HandleError logs background errors of publishing; a fatal one stops the
// plugin (publishing.Publisher.HandleError).
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	p.pub.HandleError(ctx, err, msg)
}

// SetPublisher sets where the plugin publishes; the helper exists only
// after kubeletplugin.Start, which needs the Plugin first.
func (p *Plugin) SetPublisher(pub Publisher) { p.pub.SetTarget(pub) }

// Prepared returns the UIDs of the prepared claims, sorted.
func (p *Plugin) Prepared() []string { return p.claims.Prepared() }

// DeviceCount is the number of devices in the inventory.
func (p *Plugin) DeviceCount() int { return len(p.inv.Load().Devices) }

// StorageProblem is why the plugin cannot write its files ("" when it
// can), from the last check; it never waits.
func (p *Plugin) StorageProblem() string { return p.claims.StorageProblem() }

// WatchCDI watches the CDI directory and the plugin's storage until ctx
// ends (claims.State.WatchCDI).
func (p *Plugin) WatchCDI(ctx context.Context, check time.Duration) { p.claims.WatchCDI(ctx, check) }

// RepairSpecs writes again every lost spec of the prepared claims
// (claims.State.RepairSpecs).
func (p *Plugin) RepairSpecs(ctx context.Context) error { return p.claims.RepairSpecs(ctx) }

// StatusWriter is the writer of prepared claims' status.devices, whose
// Run the plugin's run starts; nil without an API client.
func (p *Plugin) StatusWriter() *claimstatus.Writer { return p.ops.status }

// Registry is the registry of the plugin's metrics and the EFAs' counters
// (served at /metrics).
func (p *Plugin) Registry() *prometheus.Registry { return p.ops.metrics.Registry }

// EFAMetrics is the exporter of the EFAs' counters, whose read timeout and
// cache time may be tuned before the first scrape.
func (p *Plugin) EFAMetrics() *metrics.EFA { return p.ops.efa }
