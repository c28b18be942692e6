package owners

import (
	"context"
	"fmt"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/informerwait"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodeWatch keeps the plugin's Node from one watch, the kubelet's own
// kind (a field selector on metadata.name), so that the periodic owner
// checks cost the API server no request: a read of the Node every
// rescan was one request a minute per node, 17 a second per 1,000 nodes
// (docs/fleet.md, "The plugin's own API cost").
type NodeWatch struct {
	name string
	inf  cache.SharedIndexInformer
	errs *informerwait.Tracker
}

// NewNodeWatch is the watch of the node; Run runs it.
func NewNodeWatch(client kubernetes.Interface, name string) *NodeWatch {
	// The one informer, not a factory (as publishing.Slices.Watch): the
	// generated one also knows which clients can stream a watch list.
	inf := coreinformers.NewFilteredNodeInformer(client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, name).String()
	})
	// Only fails on a running informer.
	errs, _ := informerwait.Track(inf)
	return &NodeWatch{name: name, inf: inf, errs: errs}
}

// Run watches the node until ctx ends. changed, when set, is called
// whenever what Node checks (the node's labels, the device plugin's
// capacity) changes, and when the Node appears after the watch's first
// list (a Node deleted and made again, which a check in between could not
// read), so that the plugin checks again at once.
func (w *NodeWatch) Run(ctx context.Context, changed func()) {
	if changed != nil {
		_, _ = w.inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(_ any, initial bool) {
				if !initial {
					changed()
				}
			},
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(*corev1.Node)
				n, ok2 := cur.(*corev1.Node)
				if ok1 && ok2 && !ownerSignsEqual(o, n) {
					changed()
				}
			},
		})
	}
	w.inf.RunWithContext(ctx)
}

// OnUpdate calls f with each update of the Node (as it was, as it is),
// from the watch's goroutine.
func (w *NodeWatch) OnUpdate(f func(old, cur *corev1.Node)) {
	_, _ = w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 {
				f(o, n)
			}
		},
	})
}

// ownerSignsEqual tells whether two versions of a Node say the same about
// another owner of its EFAs.
func ownerSignsEqual(a, b *corev1.Node) bool {
	qa, qb := a.Status.Capacity[resources.DevicePluginResource], b.Status.Capacity[resources.DevicePluginResource]
	return a.Labels[resources.AutoModeLabel] == b.Labels[resources.AutoModeLabel] && equality.Semantic.DeepEqual(qa, qb)
}

// Get is the Node as the watch last saw it. Before the watch has listed
// it, Get waits for that until ctx ends, and then says it cannot tell,
// with the watch's last error (a role without list and watch of nodes
// answers 403).
func (w *NodeWatch) Get(ctx context.Context) (*corev1.Node, error) {
	if err := w.errs.Wait(ctx, "the watch of the Node"); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", w.name, err)
	}
	obj, ok, err := w.inf.GetStore().GetByKey(w.name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading node %s: %w", w.name, err)
	case !ok:
		return nil, fmt.Errorf("reading node %s: no such Node", w.name)
	}
	return obj.(*corev1.Node), nil
}
