// Package claimstatus writes what the plugin prepared into each claim's
// status.devices (KEP-4817, DRAResourceClaimDeviceStatus: beta since
// Kubernetes 1.33, GA in 1.37), so that `kubectl get resourceclaim -o
// yaml` says which EFA a claim got and whether it is healthy now, without
// the plugin's log or /metrics.
//
// Each entry is written by server-side apply under one field manager,
// with the claim's UID as a precondition: the apply names only this
// driver's entries of this node's pool, so the scheduler's fields and
// other drivers' entries are never touched, and an entry this manager no
// longer applies is removed by the API server. Writes happen on a worker
// goroutine (Run), never on the kubelet's prepare path: Set only records
// what is wanted. A write that fails for a reason that may pass (the API
// server away, a timeout, throttling) is retried with a back-off, at most
// MaxRetries times; one that cannot succeed (the claim is gone or was
// made anew, it was deallocated, the token may not write) is dropped.
// Where the API server refuses the write for want of a permission, or
// drops the field (the feature off), it is said once and the plugin goes
// on preparing claims.
//
// Nothing is removed at unprepare: the API server drops a claim's
// status.devices when the claim is deallocated, which the claim
// controller does as soon as its last pod is gone; until then the entries
// say what the claim was prepared with.
package claimstatus

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// FieldManager is the field manager of every apply: the entries it owns
// are the plugin's, whichever of a rolling update's pods wrote them.
const FieldManager = "efakit-plugin"

// MaxRetries bounds the retries of one claim's write after a failure that
// may pass; the next change of the claim (a health change) tries again.
const MaxRetries = 5

// The condition types of an entry.
const (
	// TypeReady is True once the device is prepared: its CDI spec is
	// written and the claim recorded in the checkpoint.
	TypeReady = "Ready"
	// TypeHealthy says whether the device is healthy now, kept current by
	// the plugin's health checks (every --health-interval).
	TypeHealthy = "Healthy"
)

// Condition is one condition of an entry, without its transition time
// (the Writer keeps it across writes while the status stays the same).
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string // CamelCase, as the API wants it
	Message string
}

// Device is the entry of one allocated device: its key in the claim's
// allocation (this driver and node's pool are the Writer's), its
// conditions, and data marshalled as JSON.
type Device struct {
	Device, ShareID string
	Conditions      []Condition
	Data            any
}

// Claim is a claim the plugin prepared, with the entries it wants.
type Claim struct {
	Namespace, Name string
	UID             types.UID
	Devices         []Device
}

// Outcome is the result of one write, as counted by Options.Observe.
type Outcome string

// The outcomes of a write.
const (
	Written   Outcome = "written"   // applied (or nothing had changed)
	Retried   Outcome = "retry"     // failed for a reason that may pass; tried again later
	Gone      Outcome = "gone"      // the claim is gone, made anew, or no longer allocated these devices
	Forbidden Outcome = "forbidden" // the token may not write the claim's status
	Dropped   Outcome = "dropped"   // the API server keeps no status.devices
	Failed    Outcome = "failed"    // refused, or retried MaxRetries times
)

// Options are what New needs.
type Options struct {
	Client kubernetes.Interface
	// DriverName and Pool key every entry (the node's name is its pool).
	DriverName, Pool string
	// Observe counts each write's outcome (nil: not counted).
	Observe func(Outcome)
	// Backoff is the first retry's delay, doubled each time up to 30 s
	// (500 ms when 0).
	Backoff time.Duration
	// Now is the clock of transition times (time.Now when nil).
	Now func() time.Time
}

// Writer writes the entries of the claims it is given. It is safe for
// concurrent use; Run does the writing.
type Writer struct {
	o     Options
	queue workqueue.TypedRateLimitingInterface[types.UID]

	mu     sync.Mutex
	claims map[types.UID]*state
	// saidForbidden: a refusal for want of permission was logged (once).
	saidForbidden bool
	// off: the API server keeps no status.devices; nothing more is sent
	// (said when it turns on).
	off bool
}

// state is what is wanted of a claim and what was last applied.
type state struct {
	want Claim
	// applied are the conditions as last applied or read, by device key
	// and type: their transition times are kept while the status stays.
	applied map[key]map[string]metav1.Condition
	// seeded: applied holds what the API has (from the kubelet's read of
	// the claim, or a read of the Writer's own); until then a write
	// first reads the claim.
	seeded bool
	// sent is the apply last written, to skip one that changes nothing.
	sent []resourceapi.AllocatedDeviceStatus
}

type key struct{ device, share string }

// New returns a Writer; nil without a client (tests, efakit slices).
func New(o Options) *Writer {
	if o.Client == nil {
		return nil
	}
	if o.Backoff == 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](o.Backoff, 30*time.Second)
	return &Writer{o: o, claims: map[types.UID]*state{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "claimstatus"})}
}

// Set says what a claim's entries should be now, and queues the write.
// seen is the claim's status.devices as the API held them when it was
// read (the kubelet helper reads each claim before a prepare), whose
// transition times are kept; nil when not known (a claim restored from
// the checkpoint at start), and then the write reads the claim first. It
// never blocks on the API.
func (w *Writer) Set(c Claim, seen []resourceapi.AllocatedDeviceStatus) {
	if w == nil {
		return
	}
	w.mu.Lock()
	st, ok := w.claims[c.UID]
	if !ok {
		st = &state{applied: map[key]map[string]metav1.Condition{}}
		w.claims[c.UID] = st
	}
	st.want = c
	if seen != nil && !st.seeded {
		w.seed(st, seen)
	}
	off := w.off
	w.mu.Unlock()
	if !off {
		w.queue.Add(c.UID)
	}
}

// Forget drops a claim: it was unprepared, and the API server drops its
// entries when the claim is deallocated.
func (w *Writer) Forget(uid types.UID) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.claims, uid)
	w.mu.Unlock()
}

// Wanted returns what is wanted of a claim, for tests and the plugin's
// health updates; false when the Writer does not know it.
func (w *Writer) Wanted(uid types.UID) (Claim, bool) {
	if w == nil {
		return Claim{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.claims[uid]
	if !ok {
		return Claim{}, false
	}
	return st.want, true
}

// seed records the conditions the API holds for this driver and pool's
// entries. Called with w.mu held.
func (w *Writer) seed(st *state, seen []resourceapi.AllocatedDeviceStatus) {
	for _, d := range seen {
		if d.Driver != w.o.DriverName || d.Pool != w.o.Pool {
			continue
		}
		k := key{d.Device, ptr.Deref(d.ShareID, "")}
		conds := map[string]metav1.Condition{}
		for _, c := range d.Conditions {
			conds[c.Type] = c
		}
		st.applied[k] = conds
		st.sent = append(st.sent, d)
	}
	sortEntries(st.sent)
	st.seeded = true
}

// Run writes until ctx ends; then the queue shuts down and Run returns.
func (w *Writer) Run(ctx context.Context) {
	if w == nil {
		return
	}
	stop := context.AfterFunc(ctx, w.queue.ShutDown)
	defer stop()
	for {
		uid, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		out := w.write(ctx, uid)
		if w.o.Observe != nil && out != "" {
			w.o.Observe(out)
		}
		switch {
		case out == Retried && w.queue.NumRequeues(uid) < MaxRetries:
			w.queue.AddRateLimited(uid)
		case out == Retried:
			klog.FromContext(ctx).Error(nil, "Claim status not written", "uid", uid, "why", fmt.Sprintf("%d tries failed", MaxRetries+1), "then", "tried again at the claim's next change")
			if w.o.Observe != nil {
				w.o.Observe(Failed)
			}
			w.queue.Forget(uid)
		default:
			w.queue.Forget(uid)
		}
		w.queue.Done(uid)
	}
}

// write applies a claim's entries, reading it first when its entries in
// the API are not known. "" when there was nothing to write.
func (w *Writer) write(ctx context.Context, uid types.UID) Outcome {
	logger := klog.FromContext(ctx)
	w.mu.Lock()
	st, ok := w.claims[uid]
	if !ok || w.off {
		w.mu.Unlock()
		return ""
	}
	c, seeded := st.want, st.seeded
	w.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !seeded {
		cur, err := w.o.Client.ResourceV1().ResourceClaims(c.Namespace).Get(rctx, c.Name, metav1.GetOptions{})
		if out := w.failed(ctx, c, err); out != "" {
			return out
		}
		if cur.UID != c.UID {
			logger.V(2).Info("Claim status not written", "claim", klog.KRef(c.Namespace, c.Name), "why", "the claim was made anew")
			return Gone
		}
		w.mu.Lock()
		w.seed(st, cur.Status.Devices)
		w.mu.Unlock()
	}
	w.mu.Lock()
	if w.claims[uid] != st {
		w.mu.Unlock()
		return "" // forgotten meanwhile
	}
	c = st.want
	entries, applied, err := w.entries(st, c)
	same := err == nil && sameEntries(entries, st.sent)
	w.mu.Unlock()
	if err != nil {
		logger.Error(err, "Claim status not written", "claim", klog.KRef(c.Namespace, c.Name))
		return Failed
	}
	if same {
		return Written
	}
	status := resourceapply.ResourceClaimStatus()
	for _, e := range entries {
		status.WithDevices(applyOf(e))
	}
	ac := resourceapply.ResourceClaim(c.Name, c.Namespace).WithUID(c.UID).WithStatus(status)
	got, err := w.o.Client.ResourceV1().ResourceClaims(c.Namespace).ApplyStatus(rctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if out := w.failed(ctx, c, err); out != "" {
		return out
	}
	if len(entries) > 0 && !w.kept(got, entries) {
		w.mu.Lock()
		first := !w.off
		w.off = true
		w.mu.Unlock()
		if first {
			logger.Error(errors.New("status.devices dropped"), "Claims' device status not written",
				"why", "the API server keeps no status.devices of ResourceClaims (DRAResourceClaimDeviceStatus is off)", "then", "the plugin writes no claim status and goes on preparing claims")
		}
		return Dropped
	}
	w.mu.Lock()
	if w.claims[uid] == st {
		st.applied, st.sent = applied, entries
	}
	w.mu.Unlock()
	logger.V(4).Info("Wrote claim status", "claim", klog.KRef(c.Namespace, c.Name), "devices", len(entries))
	return Written
}

// kept tells whether the API server kept the entries written.
func (w *Writer) kept(got *resourceapi.ResourceClaim, entries []resourceapi.AllocatedDeviceStatus) bool {
	if got == nil {
		return true
	}
	for _, d := range got.Status.Devices {
		if d.Driver == w.o.DriverName && d.Pool == w.o.Pool && d.Device == entries[0].Device {
			return true
		}
	}
	return false
}

// notAllocated is how the API's validation refuses an entry of a device
// the claim's allocation does not hold (validateDeviceStatus).
const notAllocated = "must be an allocated device in the claim"

// failed sorts an API error into an outcome; "" for no error.
func (w *Writer) failed(ctx context.Context, c Claim, err error) Outcome {
	if err == nil {
		return ""
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(c.Namespace, c.Name))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or made anew under the name (the UID precondition).
		logger.V(2).Info("Claim status not written", "why", "the claim is gone or was made anew", "err", err.Error())
		return Gone
	case apierrors.IsInvalid(err) && strings.Contains(err.Error(), notAllocated):
		// Deallocated or reallocated meanwhile: the API accepts entries
		// of allocated devices only.
		logger.V(2).Info("Claim status not written", "why", "the claim no longer holds the device", "err", err.Error())
		return Gone
	case apierrors.IsInvalid(err):
		logger.Error(err, "Claim status not written", "why", "the API refused it")
		return Failed
	case apierrors.IsForbidden(err):
		w.mu.Lock()
		first := !w.saidForbidden
		w.saidForbidden = true
		w.mu.Unlock()
		if first {
			logger.Error(err, "Claims' device status not written", "why", "the plugin's token may not write it: it needs patch of resourceclaims/status and, from Kubernetes 1.36, associated-node:patch of resourceclaims/driver for its driver name (the chart's role grants both from Kubernetes 1.36, claimStatus.rbac)",
				"then", "the plugin goes on preparing claims; said once")
		}
		return Forbidden
	case ctx.Err() != nil:
		return ""
	}
	logger.V(2).Info("Writing claim status failed; retrying", "err", err.Error())
	return Retried
}

// entries builds the claim's apply: each wanted device's entry with its
// conditions' transition times kept from the last apply while their
// status stays, sorted by device and share. Called with w.mu held.
func (w *Writer) entries(st *state, c Claim) ([]resourceapi.AllocatedDeviceStatus, map[key]map[string]metav1.Condition, error) {
	now := metav1.NewTime(w.o.Now().Truncate(time.Second))
	applied := map[key]map[string]metav1.Condition{}
	out := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.Devices))
	for _, d := range c.Devices {
		k := key{d.Device, d.ShareID}
		e := resourceapi.AllocatedDeviceStatus{Driver: w.o.DriverName, Pool: w.o.Pool, Device: d.Device}
		if d.ShareID != "" {
			share := d.ShareID
			e.ShareID = &share
		}
		conds := map[string]metav1.Condition{}
		for _, wc := range d.Conditions {
			mc := metav1.Condition{Type: wc.Type, Status: wc.Status, Reason: wc.Reason, Message: wc.Message, LastTransitionTime: now}
			if old, ok := st.applied[k][wc.Type]; ok && old.Status == wc.Status && !old.LastTransitionTime.IsZero() {
				mc.LastTransitionTime = old.LastTransitionTime
			}
			conds[wc.Type] = mc
			e.Conditions = append(e.Conditions, mc)
		}
		applied[k] = conds
		if d.Data != nil {
			raw, err := json.Marshal(d.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("device %s: data: %w", d.Device, err)
			}
			if len(raw) > resourceapi.AllocatedDeviceStatusDataMaxLength {
				return nil, nil, fmt.Errorf("device %s: data of %d bytes, the API allows %d", d.Device, len(raw), resourceapi.AllocatedDeviceStatusDataMaxLength)
			}
			e.Data = &runtime.RawExtension{Raw: raw}
		}
		out = append(out, e)
	}
	sortEntries(out)
	return out, applied, nil
}

// sameEntries tells whether two lists of entries say the same, their data
// compared as JSON values: the API server gives data back with its keys
// in another order than sent (a server-side apply goes through an
// unstructured map, whose keys are marshalled sorted), and entries read
// from it must compare equal to the same entries built here.
func sameEntries(a, b []resourceapi.AllocatedDeviceStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !sameData(x.Data, y.Data) {
			return false
		}
		x.Data, y.Data = nil, nil
		if !apiequality.Semantic.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func sameData(a, b *runtime.RawExtension) bool {
	if a == nil || b == nil {
		return a == b
	}
	var x, y any
	if json.Unmarshal(a.Raw, &x) != nil || json.Unmarshal(b.Raw, &y) != nil {
		return bytes.Equal(a.Raw, b.Raw)
	}
	return reflect.DeepEqual(x, y)
}

// sortEntries sorts entries by device and share.
func sortEntries(es []resourceapi.AllocatedDeviceStatus) {
	slices.SortFunc(es, func(a, b resourceapi.AllocatedDeviceStatus) int {
		return cmp.Or(strings.Compare(a.Device, b.Device), strings.Compare(ptr.Deref(a.ShareID, ""), ptr.Deref(b.ShareID, "")))
	})
}

// applyOf is an entry as an apply configuration.
func applyOf(e resourceapi.AllocatedDeviceStatus) *resourceapply.AllocatedDeviceStatusApplyConfiguration {
	a := resourceapply.AllocatedDeviceStatus().WithDriver(e.Driver).WithPool(e.Pool).WithDevice(e.Device)
	if e.ShareID != nil {
		a.WithShareID(*e.ShareID)
	}
	for _, c := range e.Conditions {
		a.WithConditions(metaapply.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
			WithMessage(c.Message).WithLastTransitionTime(c.LastTransitionTime))
	}
	if e.Data != nil {
		a.WithData(*e.Data)
	}
	return a
}

// EFAData is the data of an EFA's entry (status.devices[].data), what a
// user looks for when a claim's container cannot reach its EFA: which RDMA
// device and uverbs node it is, its PCI function, its port's GID, rate
// and state as the last scan read them, and how the container gets it
// (the request and its CDI device). A group device's entry has the request
// and CDI device, and its members, each an EFA's fields.
type EFAData struct {
	RDMADevice   string `json:"rdmaDevice,omitempty"`   // rdmap79s0
	UverbsDevice string `json:"uverbsDevice,omitempty"` // uverbs3
	UverbsNode   string `json:"uverbsNode,omitempty"`   // /dev/infiniband/uverbs3
	DeviceNumber string `json:"deviceNumber,omitempty"` // 231:195
	PCIAddress   string `json:"pciAddress,omitempty"`   // 0000:4f:00.0
	// The port, flattened into the same JSON object.
	PortData
	// Request is the claim's request the device was allocated for, and
	// CDIDevice the CDI device the container gets it through.
	Request   string `json:"request,omitempty"`
	CDIDevice string `json:"cdiDevice,omitempty"`
	// Shares is how many shares of an EFA shared by capacity the claim
	// holds (the allocation's consumedCapacity).
	Shares  int64     `json:"shares,omitempty"`
	Members []EFAData `json:"members,omitempty"`
	// GPUDirect is whether GPUDirect RDMA can work between the EFA and
	// each GPU it is closest to, as the last scan judged it.
	GPUDirect []GPUDirectData `json:"gpuDirect,omitempty"`
}

// PortData is an EFA's port as the last scan read it.
type PortData struct {
	GID          string  `json:"gid,omitempty"` // the port's GID 0
	LinkRateGbps float64 `json:"linkRateGbps,omitempty"`
	PortState    string  `json:"portState,omitempty"` // ACTIVE, DOWN, ...
}

// GPUDirectData is one GPU-EFA pair's GPUDirect readiness (efakit's
// gpudirect package; efakit topo prints every finding with its source).
type GPUDirectData struct {
	GPU    string `json:"gpu"`    // the GPU's PCI address
	Link   string `json:"link"`   // PXB, PHB, NODE...
	Status string `json:"status"` // ready, slow, unknown or blocked
	// ReadyBy are the paths that work: dma-buf, peer-memory.
	ReadyBy []string `json:"readyBy,omitempty"`
	// NotReady are the checks that keep a path from ready, with their
	// status: "dma-buf nvidia-topology-check: blocked".
	NotReady []string `json:"notReady,omitempty"`
	// NCCL is what NCCL does with the pair by default: within its
	// GPUDirect RDMA level, ready by aws-ofi-nccl's topology file for the
	// instance type (named), or staged through the host unless
	// NCCL_NET_GDR_LEVEL allows it.
	NCCL string `json:"nccl,omitempty"`
}
