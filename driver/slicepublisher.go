package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// SlicePublisher publishes a node's ResourceSlices through the same
// ResourceSlice controller, with the same owner (the Node) and slice names,
// as kubeletplugin.Helper.PublishResources, and can also stop doing so.
// The helper's controller, once started, runs as long as the plugin and
// deletes every slice of the driver name on its node that is not in its
// pool, another publisher's included; standing aside for another dra.net
// driver needs a controller that stops without touching that driver's
// slices.
type SlicePublisher struct {
	// Ctx bounds the controller's life (the plugin's context).
	Ctx        context.Context
	Client     kubernetes.Interface
	DriverName string
	NodeName   string
	// ErrorHandler receives the controller's errors (dropped fields, API
	// errors); they are all recoverable, as the helper treats them.
	ErrorHandler func(ctx context.Context, err error, msg string)

	mu   sync.Mutex
	ctrl *resourceslice.Controller
}

// PublishResources starts the controller with the resources, or gives it
// new ones.
func (s *SlicePublisher) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl != nil {
		s.ctrl.Update(&res)
		return nil
	}
	ctrl, err := resourceslice.StartController(s.Ctx, resourceslice.Options{
		DriverName:   s.DriverName,
		KubeClient:   s.Client,
		Owner:        &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: s.NodeName},
		Resources:    &res,
		ErrorHandler: s.ErrorHandler,
	})
	if err != nil {
		return fmt.Errorf("start ResourceSlice controller: %w", err)
	}
	s.ctrl = ctrl
	return nil
}

// Withdraw stops the controller and deletes the slices of the driver name
// on the node that efakit wrote (OwnSlice), leaving any other publisher's
// slices as they are.
func (s *SlicePublisher) Withdraw(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl != nil {
		s.ctrl.Stop()
		s.ctrl = nil
	}
	list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"spec.driver": s.DriverName, "spec.nodeName": s.NodeName}.String()})
	if err != nil {
		return fmt.Errorf("listing the node's slices: %w", err)
	}
	var errs []error
	for i := range list.Items {
		sl := &list.Items[i]
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName != s.NodeName || !OwnSlice(sl, s.DriverName) {
			continue
		}
		if err := s.Client.ResourceV1().ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &sl.UID}}); err != nil {
			errs = append(errs, fmt.Errorf("deleting slice %s: %w", sl.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops the controller, leaving the slices published.
func (s *SlicePublisher) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl != nil {
		s.ctrl.Stop()
		s.ctrl = nil
	}
}

// WatchForeign calls found whenever a ResourceSlice of the driver name on
// the node appears or changes that efakit did not write, until ctx ends:
// the running controller would delete such a slice after its sync delay
// (30 s), so the plugin checks again at once and stands aside first.
func WatchForeign(ctx context.Context, client kubernetes.Interface, driverName, node string, found func()) {
	// The one informer, not a factory: a factory links the informers and
	// listers of every API group into the plugin (9.3 MB of its 62 MB).
	inf := resourceinformers.NewFilteredResourceSliceInformer(client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.Set{"spec.driver": driverName, "spec.nodeName": node}.String()
	})
	check := func(obj any) {
		if s, ok := obj.(*resourceapi.ResourceSlice); ok && s.Spec.NodeName != nil && *s.Spec.NodeName == node && !OwnSlice(s, driverName) {
			found()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
	})
	go inf.RunWithContext(ctx)
}
