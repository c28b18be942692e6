// Package events writes the plugin's core/v1 Events about its Node,
// rate-limited and off the caller's path.
package events

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Event reasons on the Node. ReasonRenumbered is an EFA of a prepared claim
// found renumbered; ReasonStorage a directory the plugin cannot write (and
// its return).
const (
	ReasonStandingAside   = "EFAStandingAside"
	ReasonPublishing      = "EFAPublishing"
	ReasonUnhealthy       = "EFAUnhealthy"
	ReasonHealthy         = "EFAHealthy"
	ReasonPublishFailed   = "EFAPublishFailed"
	ReasonRenumbered      = "EFARenumbered"
	ReasonStorage         = "EFAStorage"
	EventSourceComponent  = "efakit-plugin"
	defaultEventBurst     = 3
	defaultEventEvery     = 5 * time.Minute
	defaultNodeEventBurst = 25
	defaultNodeEventEvery = time.Minute
)

// Recorder writes core/v1 Events about the plugin's Node, as the kubelet
// writes its own: in namespace default, involvedObject the Node with its
// name as UID (kubectl describe node finds events under the Node's UID and
// under its name), so `kubectl describe node` and `kubectl get events`
// show them beside the kubelet's. events.k8s.io/v1 would store the same
// objects; core/v1 needs no second client and nothing beyond
// client-go's typed clientset, which the plugin links already.
//
// Recording never blocks the caller: events wait in a bounded queue (one
// that is full drops the event and counts it) and one goroutine (Run)
// writes them. Writes are rate-limited, so a flapping link cannot flood
// the API server: per reason and device a burst, then one write per
// interval, and the same for the whole node; an event held back is
// counted and folded into the next event of its reason and device that is
// written (its count and first timestamp).
type Recorder struct {
	client kubernetes.Interface
	node   string
	queue  chan nodeEvent
	// Now is the clock (tests).
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket // by reason and device; "" for the node
	held    map[string]held    // events held back, by reason and device
	dropped int                // events the full queue refused
	writes  int                // Create calls made
}

type nodeEvent struct {
	typ, reason, object, message string
	at                           time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

type held struct {
	count int
	first time.Time
	last  nodeEvent // written when the limit allows, if nothing newer is
}

// New returns a Recorder writing through client about node; nil
// without a client (tests, efakit slices): a nil Recorder records nothing.
func New(client kubernetes.Interface, node string) *Recorder {
	if client == nil {
		return nil
	}
	return &Recorder{client: client, node: node, queue: make(chan nodeEvent, 64), Now: time.Now,
		buckets: map[string]*bucket{}, held: map[string]held{}}
}

// Record queues an event about object (a device name, "" for the node);
// it never blocks.
func (e *Recorder) Record(typ, reason, object, message string) {
	if e == nil {
		return
	}
	select {
	case e.queue <- nodeEvent{typ: typ, reason: reason, object: object, message: message, at: e.Now()}:
	default:
		e.mu.Lock()
		e.dropped++
		e.mu.Unlock()
	}
}

// Run writes the queued events until ctx ends; every flushEvery it writes
// the last event held back of each reason and device that the limits
// allow again, so the last word of a flapping link reaches the Node.
func (e *Recorder) Run(ctx context.Context) {
	if e == nil {
		return
	}
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			e.write(ctx, ev, false)
		case <-t.C:
			e.flush(ctx)
		}
	}
}

// maxEventMessage keeps a message within what events.k8s.io accepts (1 kB).
const maxEventMessage = 1024

const flushEvery = 30 * time.Second

// flush writes, for each reason and device with events held back, the
// last of them, where the limits allow it now.
func (e *Recorder) flush(ctx context.Context) {
	e.mu.Lock()
	var pending []nodeEvent
	for _, h := range e.held {
		pending = append(pending, h.last)
	}
	e.mu.Unlock()
	sort.Slice(pending, func(i, j int) bool {
		return pending[i].reason+"/"+pending[i].object < pending[j].reason+"/"+pending[j].object
	})
	for _, ev := range pending {
		e.write(ctx, ev, true)
	}
}

// allow takes a token from the event's bucket and the node's, or holds the
// event back. It returns how many events of its key a write stands for and
// when the first of them happened. A flush asks again for the event held
// back, which is counted already.
func (e *Recorder) allow(ev nodeEvent, flush bool) (bool, int, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := ev.reason + "/" + ev.object
	now := e.Now()
	refill := func(k string, burst int, every time.Duration) *bucket {
		b := e.buckets[k]
		if b == nil {
			b = &bucket{tokens: float64(burst), last: now}
			e.buckets[k] = b
		}
		b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.last))/float64(every))
		b.last = now
		return b
	}
	own, all := refill(key, defaultEventBurst, defaultEventEvery), refill("", defaultNodeEventBurst, defaultNodeEventEvery)
	h, wasHeld := e.held[key]
	if flush && !wasHeld {
		return false, 0, time.Time{}
	}
	if own.tokens < 1 || all.tokens < 1 {
		if !flush {
			if h.count == 0 {
				h.first = ev.at
			}
			h.count++
			h.last = ev
			e.held[key] = h
		}
		return false, 0, time.Time{}
	}
	own.tokens--
	all.tokens--
	delete(e.held, key)
	switch {
	case flush:
		return true, h.count, h.first
	case wasHeld:
		return true, h.count + 1, h.first
	}
	return true, 1, ev.at
}

func (e *Recorder) write(ctx context.Context, ev nodeEvent, flush bool) {
	ok, count, first := e.allow(ev, flush)
	if !ok {
		return
	}
	e.mu.Lock()
	e.writes++
	seq := e.writes
	e.mu.Unlock()
	ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.node, UID: types.UID(e.node)}
	msg := ev.message
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	if count > 1 {
		msg = fmt.Sprintf("%s (%d times since %s; the rest were held back)", msg, count, first.UTC().Format(time.RFC3339))
	}
	obj := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x.%x", e.node, ev.at.UnixNano(), seq),
			Namespace: metav1.NamespaceDefault,
		},
		InvolvedObject:      ref,
		Reason:              ev.reason,
		Message:             msg,
		Type:                ev.typ,
		Count:               int32(count),
		FirstTimestamp:      metav1.NewTime(first),
		LastTimestamp:       metav1.NewTime(ev.at),
		Source:              corev1.EventSource{Component: EventSourceComponent, Host: e.node},
		ReportingController: EventSourceComponent,
		ReportingInstance:   e.node,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		// Bounded by the rate limit, like the events themselves.
		klog.FromContext(ctx).Error(err, "Writing an Event on the Node failed", "reason", ev.reason, "device", ev.object)
	}
}

// Stats are how many events the queue refused and how many writes were
// made (tests, and the log at the end).
func (e *Recorder) Stats() (writes, dropped int) {
	if e == nil {
		return 0, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writes, e.dropped
}
