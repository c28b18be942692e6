package driver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// numaRefusal is the error a server without DRAListTypeAttributes answers
// a slice with numaNode in list form, as the slice controller hands it on
// (the field path and message of kube-apiserver 1.34's validation).
func numaRefusal(device int) error {
	path := field.NewPath("spec", "devices").Index(device).Child("attributes").Key(string(resources.AttrNUMANode))
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "n-0",
		field.ErrorList{field.Required(path, "exactly one value must be specified")})
	return fmt.Errorf("%w: create resource slice: %w", kubeletplugin.ErrRecoverable, invalid)
}

// TestNUMAListFallsBack: with --numa-list, numaNode is published as a list;
// when the API server refuses that form (no DRAListTypeAttributes), the
// plugin publishes it as a number from the next scan on, and keeps going.
// Another refusal does not change the form.
func TestNUMAListFallsBack(t *testing.T) {
	t.Parallel()
	newPlugin := func(t *testing.T) (*driver.Plugin, *recorder, *error) {
		root, err := sysfs.OpenCapture(p5)
		require.NoError(t, err)
		w, err := cdi.NewWriter(t.TempDir(), "dra.net")
		require.NoError(t, err)
		var stopped error
		p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{Config: resources.Config{NodeName: node, NUMAList: true},
			SysfsRoot: root, CDI: w, Store: checkpoint.NewStore(t.TempDir()), BootID: bootA,
			Hooks: driver.Hooks{Stop: func(err error) { stopped = err }}})
		require.NoError(t, err)
		rec := &recorder{}
		p.SetPublisher(rec)
		_, err = p.Rescan(context.Background())
		require.NoError(t, err)
		return p, rec, &stopped
	}
	form := func(rec *recorder) (list, scalar int) {
		for _, d := range lastDevices(rec) {
			a := d.Attributes[resources.AttrNUMANode]
			if a.IntValues != nil {
				list++
			}
			if a.IntValue != nil {
				scalar++
			}
		}
		return list, scalar
	}

	p, rec, stopped := newPlugin(t)
	list, scalar := form(rec)
	require.Equal(t, 32, list, "--numa-list: the list form")
	require.Zero(t, scalar)

	p.HandleError(context.Background(), numaRefusal(3), "publishing")
	require.NoError(t, *stopped)
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	list, scalar = form(rec)
	assert.Zero(t, list)
	assert.Equal(t, 32, scalar, "the number once the server refused the list")

	// A refusal of something else is no reason to change the form.
	p, rec, _ = newPlugin(t)
	other := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "n-0",
		field.ErrorList{field.Invalid(field.NewPath("spec", "devices").Index(0).Child("attributes").Key(string(resources.AttrRDMADev)), "x", "too long")})
	p.HandleError(context.Background(), fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, other), "publishing")
	_, err = p.Rescan(context.Background())
	require.NoError(t, err)
	list, _ = form(rec)
	assert.Equal(t, 32, list)
}

// withdrawRecorder is a publisher that can withdraw, as SlicePublisher.
type withdrawRecorder struct {
	recorder
	release   chan struct{} // Withdraw returns once it is closed
	withdrawn chan struct{}
}

func (w *withdrawRecorder) Withdraw(context.Context) error {
	<-w.release
	close(w.withdrawn)
	return nil
}

// TestDroppedCountersWithdrawn: when the API server drops mixed mode's
// counters, the plugin withdraws the slices it published (as stored they
// let a group and its members be allocated together) before it stops.
func TestDroppedCountersWithdrawn(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	var mu sync.Mutex
	var stopped error
	withdrawnAtStop := false
	pub := &withdrawRecorder{release: make(chan struct{}), withdrawn: make(chan struct{})}
	stop := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		stopped = err
		select {
		case <-pub.withdrawn:
			withdrawnAtStop = true
		default:
		}
	}
	p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{Config: resources.Config{NodeName: node, Groups: resources.GroupsMixed},
		SysfsRoot: root, CDI: w, Store: checkpoint.NewStore(t.TempDir()), BootID: bootA, Hooks: driver.Hooks{Stop: stop}})
	require.NoError(t, err)
	p.SetPublisher(pub)
	_, err = p.Rescan(context.Background())
	require.NoError(t, err)
	require.NotZero(t, pub.count())

	want := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: []resourceapi.CounterSet{{Name: "efas-pci0000-44"}}}}
	// Each slice of the pool reports its drop; the second report must
	// not stop the plugin while the first is withdrawing.
	for range 2 {
		p.HandleError(context.Background(), &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: want, ActualSlice: &resourceapi.ResourceSlice{}}, "publishing")
	}
	mu.Lock()
	assert.NoError(t, stopped, "stopped before the slices were withdrawn")
	mu.Unlock()
	close(pub.release)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return stopped != nil }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	assert.True(t, withdrawnAtStop, "withdrawn before the stop")
	assert.Contains(t, stopped.Error(), "needs DRAPartitionableDevices")
	mu.Unlock()
}

// TestNoneEffectFallsBack: an API server from before the taint effect
// None refuses a slice with a degraded device's taint; the plugin
// publishes degraded devices unmarked from the next scan on, and keeps
// the unhealthy ones' taints.
func TestNoneEffectFallsBack(t *testing.T) {
	t.Parallel()
	s := &swapFS{}
	s.cur.Store(withCounters(t, nil))
	var stopped error
	p := newTestPlugin(t, s, func(o *driver.PluginOptions) { o.Hooks.Stop = func(err error) { stopped = err } })
	rec := &recorder{}
	p.SetPublisher(rec)
	for range 2 { // the EFAs, then their counters' baseline
		_, err := p.Rescan(context.Background())
		require.NoError(t, err)
	}
	// 4f degraded, 50 unhealthy.
	s.cur.Store(withCounters(t, map[string]map[string]uint64{"4f": {"impaired_remote_conn_events": 20}, "50": {"no_completion_cmds": 2}}))
	_, err := p.Rescan(context.Background())
	require.NoError(t, err)
	require.Len(t, lastDevices(rec)["efa-0000-4f-00-0"].Taints, 1)

	// kube-apiserver's validation of an effect it does not know.
	path := field.NewPath("spec", "devices").Index(0).Child("taints").Index(0).Child("effect")
	refusal := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "n-0",
		field.ErrorList{field.NotSupported(path, resourceapi.DeviceTaintEffectNone, []string{"NoSchedule", "NoExecute"})})
	p.HandleError(context.Background(), fmt.Errorf("%w: create resource slice: %w", kubeletplugin.ErrRecoverable, refusal), "publishing")
	require.NoError(t, stopped)
	_, err = p.Rescan(context.Background())
	require.NoError(t, err)
	devs := lastDevices(rec)
	assert.Empty(t, devs["efa-0000-4f-00-0"].Taints, "degraded, unmarked")
	assert.Equal(t, "admin-timeouts", devs["efa-0000-50-00-0"].Taints[0].Value, "unhealthy, still tainted")
	ss := gather(t, p.Registry())
	assert.Equal(t, 1.0, find(ss, "efakit_plugin_degraded_devices", map[string]string{"action": "none"})[0].value)
}
