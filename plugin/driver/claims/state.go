// Package claims is the kubelet plugin's claim state: the prepared claims,
// their CDI specs and the checkpoint that records them. It is the one part
// of the plugin with a lock held across the disk (its CDI writes and the
// checkpoint's fsync), and a prepare takes no other: each call decides on
// the inventory snapshot it is handed (driver/inventory), never on a
// scan in progress. Readers (the EFA exporter's targets, the claims'
// status, the renumbering check after a scan) read Committed, the state
// last saved or loaded, and never take the lock.
package claims

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/podresources"
)

// State is the claim state. Its methods are safe for concurrent use; the
// kubelet's calls, the repairs of lost specs and the corrections after a
// renumbering take its lock one at a time.
type State struct {
	mu sync.Mutex
	// cur is the claim state under mu: the committed one, or during a
	// kubelet call the call's own copy (see batch).
	cur *checkpoint.State
	// committed is the state last saved or loaded, replaced whole and
	// never changed once stored: what the readers read.
	committed atomic.Pointer[checkpoint.State]
	files     Files
	node      Node
	deps      Deps
	// storage: why the plugin cannot write its files ("" or nil when it
	// can), from the last check (checkStorage); /readyz reads it.
	storage atomic.Pointer[string]
	// checkFiles asks WatchFiles for a check of the directories now (a
	// prepare failed to write).
	checkFiles chan struct{}
}

// Files are where the claim state lives and what a prepare reads.
type Files struct {
	CDI   *cdi.Writer
	Store *checkpoint.Store
	// BootID is the kernel's boot ID: state from another boot is dropped.
	BootID string
	// DataDir is the plugin's directory under the kubelet's plugins
	// directory: the lock file shared with a rolling update's other pod,
	// and the helper's device-metadata files. "" for neither.
	DataDir string
	// Sysfs is read for the uverbs device numbers at each prepare.
	Sysfs fs.ReadLinkFS
}

// Node names the pool the claims' devices come from.
type Node struct {
	Driver, Name string
}

// Deps are what the claim state reports to and asks, each optional but
// Metrics.
type Deps struct {
	// Kube reads a prepared claim whose EFAs another claim asks for (the
	// forced-delete handover); nil: such a prepare is refused until the
	// kubelet unprepares the first claim.
	Kube kubernetes.Interface
	// Pods lists which containers of the node's pods use which claims
	// (the libfabric environment's check, the pods a message names).
	Pods    PodLister
	Metrics *metrics.Metrics
	Events  *events.Recorder
	// Status writes prepared claims' status.devices.
	Status *claimstatus.Writer
	// AskRescan asks the scanning goroutine for a scan soon: a prepare
	// saw sysfs differ from the snapshot it was handed. It never blocks.
	AskRescan func()
	// Traffic gives each allocated device's TrafficSeen condition (nil:
	// none).
	Traffic Traffic
}

// Traffic gives an allocated device's TrafficSeen condition, false when
// it judges nothing of it (traffic.Tracker).
type Traffic interface {
	Condition(uid, device, shareID string, now time.Time) (claimstatus.Condition, bool)
}

// PodLister lists the node's pods with the claims their containers use:
// the kubelet's PodResources API (podresources.Client) in the plugin.
type PodLister interface {
	List(ctx context.Context) ([]podresources.Pod, error)
}

// Load restores the claim state from the checkpoint (see restore), holding
// the same lock file as the kubelet calls of a plugin pod beside this one
// during a rolling update. A corrupt checkpoint is reported in the
// returned error and the state starts empty rather than crash-looping; the
// returned State is usable whenever it is not nil. A checkpoint of a newer
// format (a rollback) gives a nil State and the error: starting empty
// would forget what is prepared.
func Load(ctx context.Context, f Files, n Node, d Deps) (*State, error) {
	if d.AskRescan == nil {
		d.AskRescan = func() {}
	}
	s := &State{files: f, node: n, deps: d, checkFiles: make(chan struct{}, 1)}
	if f.DataDir != "" {
		unlock, err := LockDataDir(ctx, f.DataDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	st, loadErr := f.Store.Load(f.BootID)
	if st == nil {
		return nil, fmt.Errorf("checkpoint: %w", loadErr)
	}
	s.setState(st)
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
	s.mu.Lock()
	errs = append(errs, s.restore(ctx, true)...)
	s.mu.Unlock()
	return s, errors.Join(errs...)
}

// Committed is the claim state last saved or loaded. The caller must not
// change it.
func (s *State) Committed() *checkpoint.State { return s.committed.Load() }

// Prepared returns the UIDs of the prepared claims, sorted.
func (s *State) Prepared() []string {
	var out []string
	for uid := range s.Committed().Claims {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}
