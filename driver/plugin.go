package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efakit/efakit/driver/claimstatus"
	"github.com/efakit/efakit/driver/events"
	"github.com/efakit/efakit/driver/metrics"
	"github.com/efakit/efakit/driver/owners"
	"github.com/efakit/efakit/driver/resources"
	"github.com/prometheus/client_golang/prometheus"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/driver/podresources"
	"github.com/efakit/efakit/efa"
)

// Publisher publishes the node's devices: a publishing.Slices in the plugin,
// a recorder in tests.
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Plugin is the DRA kubelet plugin's logic: it scans sysfs, publishes the
// EFAs, and prepares claims through CDI specs and a checkpoint. It
// implements kubeletplugin.DRAPlugin over parts with one concern each:
// the inventory (what the last scan found, and health), the publishing
// state, the claim state (checkpoint, CDI, held device numbers) and the
// operations hooks, all set by NewPlugin. The three states are guarded by
// one mutex: a prepare decides on the inventory and the claim state at
// once, and a publish on the inventory and the publishing state. Its
// goroutines are started and stopped by Serve (see run.go), never by the
// Plugin itself, save the helper's calls.
type Plugin struct {
	cfg   resources.Config
	sysfs fs.ReadLinkFS
	// kube reads a prepared claim whose EFAs another claim asks for (the
	// forced-delete handover); nil without an API server (tests, efakit
	// slices).
	kube kubernetes.Interface
	// pods lists which containers of the node's pods use which claims
	// (the kubelet's PodResources API): the libfabric environment's
	// check, and the pods named where a claim is refused or renumbered.
	// nil without a kubelet.
	pods PodLister
	ops  operations
	// rescans are the scans asked for, with their reasons, that Run has
	// yet to make.
	rescans *rescans

	mu         sync.Mutex
	inv        inventory
	publishing publishState
	claims     claimState

	// What the readers that must never wait behind a prepare's writes
	// (the EFA exporter's targets) read instead of the three states:
	// values replaced whole under mu, never changed once stored.
	committed atomic.Pointer[checkpoint.State]           // the claim state last saved or loaded
	scanned   atomic.Pointer[map[string]inventoryDevice] // inv.devices of the last scan
}

// operations are the Plugin's hooks and outputs beside its API: set by
// NewPlugin, never changed after.
type operations struct {
	metrics *metrics.Metrics
	// efa exports the EFAs' counters in metrics.Registry.
	efa *metrics.EFA
	// events records health changes, standing aside and failed publishes
	// as Events on the Node; nil records nothing.
	events *events.Recorder
	// stop is called on a fatal background error (HandleError); it does
	// nothing when the options gave none.
	stop func(err error)
	// precheck runs before each periodic scan and says why the plugin must
	// publish and prepare nothing (an empty Verdict when it may), or an
	// error when it cannot tell; nil for no check.
	precheck owners.Check
	// healthInterval is how often health is re-checked and re-sent (the
	// kubelet treats a device as unknown after 30 s without a report).
	healthInterval time.Duration
	// spawn starts the one goroutine the Plugin starts itself (the
	// withdrawal before a fatal stop): the run's, which waits for it at
	// stop; a plain go statement without one.
	spawn func(func())
	// status writes prepared claims' status.devices (its Run is the run's
	// goroutine); nil without an API client.
	status *claimstatus.Writer
}

// inventory is what the last scan found, with health (under Plugin.mu).
type inventory struct {
	base    *resourceslice.DriverResources // from the last scan, health not applied
	devices map[string]inventoryDevice     // by published device name
	groups  map[string][]string            // group device name -> member device names
	// healthMembers are each group's members for its health: the scan's,
	// and those that left it unhealthy (gone from sysfs, no uverbs
	// device), so that a group never turns healthy by shrinking.
	healthMembers map[string][]string
	health        map[string]deviceHealth // by published device name
	scanErr       string                  // the last scan's errors, named by the publish they cause
}

// publishState is what was published and whether the plugin may publish
// (under Plugin.mu).
type publishState struct {
	to        Publisher
	published *resourceslice.DriverResources // last published
	blocked   string                         // why nothing is published; "" normally
	checked   bool                           // precheck answered at least once
	checkErr  string                         // the last failed check for another owner, logged when it changes
	// taintsDropped: the API server drops device taints, so unhealthy
	// devices are left out of the slices instead.
	taintsDropped bool
	// sharingDropped: the API server drops consumable capacity, so EFAs
	// are published for one claim at a time whatever --sharing says.
	sharingDropped bool
	// numaScalar: the API server refuses numaNode in list form, so it is
	// published as a number whatever --numa-list says.
	numaScalar bool
	// stopping: a fatal publishing error is withdrawing the slices and
	// stopping the plugin.
	stopping bool
}

// claimState is what the plugin prepared and where it writes (under
// Plugin.mu, save the writers, which are safe to share).
type claimState struct {
	cdi    *cdi.Writer
	store  *checkpoint.Store
	bootID string
	// dataDir is the plugin's directory under the kubelet's plugins
	// directory: the lock file shared with a rolling update's other pod,
	// and the helper's device-metadata files.
	dataDir string
	state   *checkpoint.State
	// storage: why the plugin cannot write its files ("" or nil when it
	// can), from the last check (checkStorage); read and written without
	// Plugin.mu, so /readyz never waits behind a prepare.
	storage atomic.Pointer[string]
	// checkFiles asks WatchCDI for a check of the directories now (a
	// prepare failed to write).
	checkFiles chan struct{}
}

// PodLister lists the node's pods with the claims their containers use:
// the kubelet's PodResources API (podresources.Client) in the plugin.
type PodLister interface {
	List(ctx context.Context) ([]podresources.Pod, error)
}

// inventoryDevice is what Prepare needs of a published EFA, from the last
// scan: prepare reads the uverbs device numbers from sysfs again.
type inventoryDevice struct {
	RDMAName string
	Uverbs   string
	// Major and Minor are the uverbs device's number.
	Major, Minor uint32
	PCIAddress   string
	Attributes   map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	// EFA is the scan's device, whose counters /metrics reads; nil for a
	// group device.
	EFA *efa.Device
}

type deviceHealth struct {
	status  kubeletplugin.HealthStatus
	message string
	reason  string // a label value: the taint's value
}

// PluginOptions are what NewPlugin needs.
type PluginOptions struct {
	Config resources.Config
	// SysfsRoot is the sysfs to scan (the host's /sys, mounted read-only).
	SysfsRoot fs.ReadLinkFS
	CDI       *cdi.Writer
	Store     *checkpoint.Store
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
	// HealthInterval is how often health is re-checked (10 s when 0).
	HealthInterval time.Duration
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

// NewPlugin restores the checkpoint (see restore), holding the same lock
// file as the kubelet calls of a plugin pod beside this one during a
// rolling update. A corrupt checkpoint is reported in the returned error
// and the plugin starts empty rather than crash-looping; the returned
// Plugin is usable whenever it is not nil. A checkpoint of a newer format
// (a rollback) gives a nil Plugin and the error: starting empty would
// forget what is prepared.
func NewPlugin(ctx context.Context, o PluginOptions) (*Plugin, error) {
	p := &Plugin{
		cfg: o.Config, sysfs: o.SysfsRoot, kube: o.KubeClient, pods: o.Pods,
		ops: operations{metrics: metrics.New(), events: o.Events, stop: o.Stop, precheck: o.Precheck,
			healthInterval: cmp.Or(o.HealthInterval, 10*time.Second), spawn: o.Spawn},
		rescans: newRescans(),
		inv:     inventory{devices: map[string]inventoryDevice{}, health: map[string]deviceHealth{}},
		claims: claimState{cdi: o.CDI, store: o.Store, bootID: o.BootID, dataDir: o.DataDir,
			checkFiles: make(chan struct{}, 1)},
	}
	if p.ops.spawn == nil {
		p.ops.spawn = func(f func()) { go f() }
	}
	if p.ops.stop == nil {
		p.ops.stop = func(error) {}
	}
	p.ops.status = claimstatus.New(claimstatus.Options{Client: o.StatusClient, DriverName: o.Config.Driver(), Pool: o.Config.NodeName,
		Observe: func(out claimstatus.Outcome) { p.ops.metrics.ClaimStatus.WithLabelValues(string(out)).Inc() }})
	p.ops.efa = metrics.NewEFA(o.SysfsRoot, p.efaTargets)
	p.ops.metrics.Registry.MustRegister(p.ops.efa)
	if o.DataDir != "" {
		unlock, err := lockDataDir(ctx, o.DataDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	st, loadErr := p.claims.store.Load(o.BootID)
	if st == nil {
		return nil, fmt.Errorf("checkpoint: %w", loadErr)
	}
	p.setState(st)
	var errs []error
	if loadErr != nil {
		errs = append(errs, fmt.Errorf("checkpoint: %w", loadErr))
	}
	if len(st.Dropped) > 0 {
		// Claims from before a reboot: the kubelet prepares again, and
		// their specs (if the CDI directory survived) describe nothing;
		// restore removes them with the other leftovers.
		klog.FromContext(ctx).Info("Dropped claims prepared before the node rebooted", "count", len(st.Dropped))
	}
	errs = append(errs, p.restore(ctx, true)...)
	return p, errors.Join(errs...)
}

// askRescan asks Run for a scan soon, saying why; it never blocks.
func (p *Plugin) askRescan(reason rescanReason) { p.rescans.ask(reason) }

// kickStorageCheck asks WatchCDI to check the directories now (a write
// failed); it never blocks.
func (p *Plugin) kickStorageCheck() {
	select {
	case p.claims.checkFiles <- struct{}{}:
	default:
	}
}

// StatusWriter is the writer of prepared claims' status.devices, whose
// Run the plugin's run starts; nil without an API client.
func (p *Plugin) StatusWriter() *claimstatus.Writer { return p.ops.status }

// Registry is the registry of the plugin's metrics and the EFAs' counters
// (served at /metrics).
func (p *Plugin) Registry() *prometheus.Registry { return p.ops.metrics.Registry }

// EFAMetrics is the exporter of the EFAs' counters, whose read timeout and
// cache time may be tuned before the first scrape.
func (p *Plugin) EFAMetrics() *metrics.EFA { return p.ops.efa }
