// Package events writes the plugin's core/v1 Events about its Node through
// client-go's EventBroadcaster (k8s.io/client-go/tools/record): off the
// caller's path, with its correlator's spam filter and aggregation.
package events

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Event reasons on the Node. ReasonRenumbered is an EFA of a prepared claim
// found renumbered; ReasonStorage a directory the plugin cannot write (and
// its return).
const (
	ReasonStandingAside  = "EFAStandingAside"
	ReasonPublishing     = "EFAPublishing"
	ReasonUnhealthy      = "EFAUnhealthy"
	ReasonDegraded       = "EFADegraded"
	ReasonHealthy        = "EFAHealthy"
	ReasonPublishFailed  = "EFAPublishFailed"
	ReasonRenumbered     = "EFARenumbered"
	ReasonStorage        = "EFAStorage"
	EventSourceComponent = "efakit-plugin"
)

// Event reasons on a ResourceClaim (RecordClaim): a device of the claim
// carried no RDMA traffic for --idle-after, and carried it again.
const (
	ReasonNoTraffic = "EFANoTraffic"
	ReasonTraffic   = "EFATraffic"
)

// AnnotationDevice names, on an Event about one device, the published
// device it is about.
const AnnotationDevice = "efakit.io/device"

// The spam filter's token bucket, per reason and device: a burst of
// SpamBurst, then one Event every SpamEvery (as client-go's default
// allows one every five minutes per object).
const (
	SpamBurst = 3
	spamQPS   = 1. / 300.
)

// Recorder writes core/v1 Events about the plugin's Node, as the kubelet
// writes its own: in namespace default, involvedObject the Node with its
// name as UID (kubectl describe node finds events under the Node's UID and
// under its name), so `kubectl describe node` and `kubectl get events`
// show them beside the kubelet's.
//
// Recording never blocks the caller: client-go's broadcaster queues the
// Event (up to 1,000, then drops) and writes it from a goroutine of its
// own. Its correlator bounds what a flapping link costs the API server:
// an Event identical to an earlier one is a PATCH of its count; more than
// ten of one reason within ten minutes are aggregated into one; and each
// reason and device has a token bucket of SpamBurst, then one every five
// minutes, beyond which Events are dropped (the claim's status and the
// metrics still say what happened).
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        *corev1.ObjectReference
}

// New starts writing Events through client about node until ctx ends or
// Stop; nil without a client (tests, efakit slices): a nil Recorder
// records nothing. clk is the spam filter's and aggregator's clock (nil:
// the real one).
func New(ctx context.Context, client kubernetes.Interface, node string, clk clock.PassiveClock) *Recorder {
	if client == nil {
		return nil
	}
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: SpamBurst, QPS: spamQPS, Clock: clk, SpamKeyFunc: spamKey,
	}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Recorder{broadcaster: b,
		recorder: b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: EventSourceComponent, Host: node}),
		node:     &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}}
}

// spamKey is the spam filter's key: the source, the Node, the type, the
// reason and the device, so that one flapping EFA does not hold back
// another's Events.
func spamKey(e *corev1.Event) string {
	return strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Name,
		string(e.InvolvedObject.UID), e.Type, e.Reason, e.Annotations[AnnotationDevice]}, "/")
}

// Record queues an event about object (a device name, "" for the node);
// it never blocks.
func (e *Recorder) Record(typ, reason, object, message string) {
	if e == nil {
		return
	}
	var annotations map[string]string
	if object != "" {
		annotations = map[string]string{AnnotationDevice: object}
	}
	e.recorder.AnnotatedEventf(e.node, annotations, typ, reason, "%s", truncate(message))
}

// RecordClaim queues an event about a device of a ResourceClaim (in the
// claim's namespace, so kubectl describe resourceclaim shows it); it
// never blocks.
func (e *Recorder) RecordClaim(typ, reason, namespace, name, uid, device, message string) {
	if e == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "ResourceClaim", APIVersion: "resource.k8s.io/v1", Namespace: namespace, Name: name, UID: types.UID(uid)}
	e.recorder.AnnotatedEventf(ref, map[string]string{AnnotationDevice: device}, typ, reason, "%s", truncate(message))
}

// Stop ends the broadcaster: queued Events are handed on, and a write
// waiting to be retried is given up.
func (e *Recorder) Stop() {
	if e != nil {
		e.broadcaster.Shutdown()
	}
}

// maxEventMessage keeps a message within what events.k8s.io accepts (1 kB).
const maxEventMessage = 1024

func truncate(msg string) string {
	if len(msg) > maxEventMessage {
		return msg[:maxEventMessage-3] + "..."
	}
	return msg
}
