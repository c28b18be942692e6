package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/pcie"
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
