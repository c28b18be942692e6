// Package publishing publishes the node's ResourceSlices through a
// controller the plugin can stop without deleting another publisher's
// slices, and watches for foreign slices of its driver name.
package publishing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/informerwait"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Slices publishes a node's ResourceSlices through the same
// ResourceSlice controller, with the same owner (the Node) and slice names,
// as kubeletplugin.Helper.PublishResources, and can also stop doing so.
// The helper's controller, once started, runs as long as the plugin and
// deletes every slice of the driver name on its node that is not in its
// pool, another publisher's included; standing aside for another dra.net
// driver needs a controller that stops without touching that driver's
// slices.
type Slices struct {
	// Ctx bounds the controller's life (the plugin's context).
	Ctx        context.Context
	Client     kubernetes.Interface
	DriverName string
	NodeName   string
	// ErrorHandler receives the controller's errors (dropped fields, API
	// errors); they are all recoverable, as the helper treats them.
	ErrorHandler func(ctx context.Context, err error, msg string)
	// SyncDelay is how long after a change to the node's slices the
	// controller syncs them (RepairDelay when 0).
	SyncDelay time.Duration

	mu        sync.Mutex
	ctrl      *resourceslice.Controller
	desired   *resourceslice.DriverResources // what the controller publishes
	withdrawn map[types.UID]bool             // slices Withdraw deleted: not a repair
	watch     watched                        // the watch's slices of the node (Watch)
	// repair: own slices deleted or changed by someone else, by name, since
	// when; logged once when all are back.
	repair repair
}

// watched is what Watch's informer holds: the node's slices, and its
// first list and last error.
type watched struct {
	store cache.Store
	errs  *informerwait.Tracker
}

// repair is what someone else deleted or changed of the plugin's slices.
type repair struct {
	slices map[string]string // what happened, by slice name; nil when none
	since  time.Time
}

// RepairDelay is the controller's delay between a change to the node's
// slices and its sync, instead of the helper's 30 s
// (resourceslice.DefaultSyncDelay): a kubelet restart deletes every slice
// of its node, which left the node without EFAs for half a minute. What a
// short delay costs, from the controller's code: its own creates and
// updates also schedule a sync, which finds its informer's cache (and the
// mutation cache that holds its own writes) in step and writes nothing; a
// sync that runs before the cache has seen one of its own deletes makes a
// redundant delete, which the API server answers NotFound. A sync is only
// ever scheduled by a watch event, which the cache holds already. Another
// writer that keeps changing the slices (two plugin pods of different
// versions during a rolling update) meets a write a second instead of one
// in 30 s.
const RepairDelay = time.Second

// RepairJitter spreads a fleet's repairs: a plugin's sync delay is
// RepairDelay plus a random part of RepairJitter, drawn once per process
// (JitteredRepairDelay). A change that reaches every node at once (the
// kubelets of a fleet restarted together, deleting every slice) is then
// written back over two seconds, not in the same instant by every node:
// 1,000 nodes make 500 creates a second instead of 1,000 at once
// (docs/fleet.md, "The plugin's own API cost").
const RepairJitter = 2 * time.Second

// JitteredRepairDelay is RepairDelay plus a random duration below
// RepairJitter.
func JitteredRepairDelay() time.Duration {
	return RepairDelay + rand.N(RepairJitter)
}

// PublishResources starts the controller with the resources, or gives it
// new ones.
func (s *Slices) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired = res.DeepCopy()
	if s.ctrl != nil {
		s.ctrl.Update(&res)
		return nil
	}
	delay := s.SyncDelay
	if delay <= 0 {
		delay = RepairDelay
	}
	ctrl, err := resourceslice.StartController(s.Ctx, resourceslice.Options{
		DriverName:   s.DriverName,
		KubeClient:   s.Client,
		Owner:        &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: s.NodeName},
		Resources:    &res,
		ErrorHandler: s.ErrorHandler,
		SyncDelay:    &delay,
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
func (s *Slices) Withdraw(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl != nil {
		s.ctrl.Stop()
		s.ctrl = nil
	}
	s.desired, s.repair.slices = nil, nil
	list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"spec.driver": s.DriverName, "spec.nodeName": s.NodeName}.String()})
	if err != nil {
		return fmt.Errorf("listing the node's slices: %w", err)
	}
	var errs []error
	for i := range list.Items {
		sl := &list.Items[i]
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName != s.NodeName || !resources.OwnSlice(sl, s.DriverName) {
			continue
		}
		if s.withdrawn == nil {
			s.withdrawn = map[types.UID]bool{}
		}
		s.withdrawn[sl.UID] = true
		if err := s.Client.ResourceV1().ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &sl.UID}}); err != nil {
			errs = append(errs, fmt.Errorf("deleting slice %s: %w", sl.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops the controller, leaving the slices published.
func (s *Slices) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl != nil {
		s.ctrl.Stop()
		s.ctrl = nil
	}
}

// Watch watches the ResourceSlices of the driver name on the node until
// ctx ends. It calls foreign whenever one appears or changes that efakit
// did not write: the running controller would delete such a slice after
// its sync delay, so the plugin checks again at once and stands aside
// first. And it tells the operator, once per repair, when someone else (a
// restarting kubelet deletes every slice of its node) deleted or changed
// a slice the controller publishes, and the controller put it back.
//
// Watch sets the watch up (Current reads it from then on) and returns
// what runs it: the caller runs that in a goroutine of its own, which
// returns when ctx ends.
func (s *Slices) Watch(ctx context.Context, foreign func()) (run func()) {
	// The one informer, not a factory: a factory links the informers and
	// listers of every API group into the plugin (9.3 MB of its 62 MB).
	inf := resourceinformers.NewFilteredResourceSliceInformer(s.Client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.Set{"spec.driver": s.DriverName, "spec.nodeName": s.NodeName}.String()
	})
	// Only fails on a running informer.
	errs, _ := informerwait.Track(inf)
	s.mu.Lock()
	s.watch = watched{store: inf.GetStore(), errs: errs}
	s.mu.Unlock()
	logger := klog.FromContext(ctx)
	mine := func(obj any) *resourceapi.ResourceSlice {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		sl, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || sl.Spec.NodeName == nil || *sl.Spec.NodeName != s.NodeName {
			return nil
		}
		if !resources.OwnSlice(sl, s.DriverName) {
			foreign()
			return nil
		}
		return sl
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if mine(obj) != nil {
				s.repaired(logger)
			}
		},
		UpdateFunc: func(old, obj any) {
			prev, cur := mine(old), mine(obj)
			if prev != nil && cur != nil {
				s.noteRepair(prev, cur, "changed")
				s.repaired(logger)
			}
		},
		DeleteFunc: func(obj any) {
			if sl := mine(obj); sl != nil {
				s.noteRepair(sl, nil, "deleted")
			}
		},
	})
	return func() { inf.RunWithContext(ctx) }
}

// Current is the node's ResourceSlices of the driver name as the watch
// holds them (Watch has started it). Before the watch has listed them,
// Current waits for that until ctx ends, and then says it cannot tell.
func (s *Slices) Current(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	s.mu.Lock()
	store, errs := s.watch.store, s.watch.errs
	s.mu.Unlock()
	if store == nil {
		return nil, errors.New("the watch of the node's slices has not started")
	}
	if err := errs.Wait(ctx, "the watch of the node's slices"); err != nil {
		return nil, err
	}
	var out []resourceapi.ResourceSlice
	for _, obj := range store.List() {
		if sl, ok := obj.(*resourceapi.ResourceSlice); ok {
			out = append(out, *sl)
		}
	}
	return out, nil
}

// noteRepair records that someone else deleted (cur nil) or changed one of
// the slices the controller publishes: it held what the controller
// publishes before, and no longer does. The controller's own writes
// never do that: it deletes obsolete slices and writes desired ones.
func (s *Slices) noteRepair(prev, cur *resourceapi.ResourceSlice, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl == nil || s.withdrawn[prev.UID] || s.matches(prev) < 0 || (cur != nil && s.matches(cur) >= 0) {
		return
	}
	if s.repair.slices == nil {
		s.repair = repair{slices: map[string]string{}, since: time.Now()}
	}
	s.repair.slices[prev.Name] = what
}

// repaired logs, once, that the slices someone else deleted or changed
// are published again, when the watch shows every slice the controller
// publishes as it should be.
func (s *Slices) repaired(logger klog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.repair.slices) == 0 || s.desired == nil || s.watch.store == nil {
		return
	}
	want := 0
	for _, pool := range s.desired.Pools {
		want += len(pool.Slices)
	}
	found := map[int]bool{}
	for _, obj := range s.watch.store.List() {
		sl, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || !resources.OwnSlice(sl, s.DriverName) {
			continue
		}
		i := s.matches(sl)
		if i < 0 || found[i] {
			return // not yet as published
		}
		found[i] = true
	}
	if len(found) != want {
		return
	}
	var deleted, changed []string
	for name, what := range s.repair.slices {
		if what == "deleted" {
			deleted = append(deleted, name)
		} else {
			changed = append(changed, name)
		}
	}
	sort.Strings(deleted)
	sort.Strings(changed)
	logger.Info("Published again the ResourceSlices someone else deleted or changed", "note", "a kubelet restart deletes them all",
		"deleted", deleted, "changed", changed, "after", time.Since(s.repair.since).Round(time.Millisecond))
	s.repair.slices = nil
}

// matches is the index, counted over the desired pools' slices in pool
// name order, of the desired slice whose devices and counters sl holds;
// -1 for none. s.mu is held.
func (s *Slices) matches(sl *resourceapi.ResourceSlice) int {
	if s.desired == nil {
		return -1
	}
	pools := make([]string, 0, len(s.desired.Pools))
	for name := range s.desired.Pools {
		pools = append(pools, name)
	}
	sort.Strings(pools)
	i := 0
	for _, name := range pools {
		for _, d := range s.desired.Pools[name].Slices {
			if sl.Spec.Pool.Name == name && resourceslice.DevicesDeepEqual(sl.Spec.Devices, d.Devices) &&
				apiequality.Semantic.DeepEqual(sl.Spec.SharedCounters, d.SharedCounters) {
				return i
			}
			i++
		}
	}
	return -1
}
