package claimstatus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

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
