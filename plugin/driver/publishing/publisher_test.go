package publishing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// failingTarget fails every publish.
type failingTarget struct{}

func (failingTarget) PublishResources(context.Context, resourceslice.DriverResources) error {
	return errors.New("connection refused")
}

// TestEventsPublishFailed: a failed publish is a Warning on the Node.
func TestEventsPublishFailed(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.New(ctx, client, node, nil)
	defer rec.Stop()
	cfg := resources.Config{NodeName: node}
	p, m := newPublisher(cfg, func(o *publishing.PublisherOptions) { o.Events = rec })
	p.SetTarget(failingTarget{})
	published, err := p.Publish(ctx, snapshot(t, full(t), cfg, nil, nil))
	require.ErrorContains(t, err, "connection refused")
	assert.False(t, published)
	nodeEvents := func() []corev1.Event {
		l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		return l.Items
	}
	require.Eventually(t, func() bool { return len(nodeEvents()) == 1 }, 10*time.Second, 10*time.Millisecond)
	e := nodeEvents()[0]
	assert.Equal(t, "EFAPublishFailed", e.Reason)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Message, "connection refused")
	assert.Zero(t, value(t, m.Published), "not counted as published")
}

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
// publisher asks for a scan, and the configuration the scans build with
// (Config) publishes it as a number from then on; the plugin keeps going.
// Another refusal does not change the form.
func TestNUMAListFallsBack(t *testing.T) {
	t.Parallel()
	newRun := func(t *testing.T) run {
		r := run{rec: &drivertest.Recorder{}, stopped: &atomic.Value{}, asked: &atomic.Int32{}}
		r.p, _ = newPublisher(resources.Config{NodeName: node, NUMAList: true}, func(o *publishing.PublisherOptions) {
			o.Stop = func(err error) { r.stopped.Store(err) }
			o.AskRescan = func() { r.asked.Add(1) }
		})
		r.p.SetTarget(r.rec)
		r.scan(t)
		return r
	}
	form := func(rec *drivertest.Recorder) (list, scalar int) {
		for _, d := range rec.LastDevices() {
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

	r := newRun(t)
	list, scalar := form(r.rec)
	require.Equal(t, 32, list, "--numa-list: the list form")
	require.Zero(t, scalar)

	r.p.HandleError(context.Background(), numaRefusal(3), "publishing")
	assert.Nil(t, r.stopped.Load())
	assert.Equal(t, int32(1), r.asked.Load(), "a scan asked for, to publish the number")
	r.scan(t)
	list, scalar = form(r.rec)
	assert.Zero(t, list)
	assert.Equal(t, 32, scalar, "the number once the server refused the list")

	// A refusal of something else is no reason to change the form.
	r = newRun(t)
	other := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "n-0",
		field.ErrorList{field.Invalid(field.NewPath("spec", "devices").Index(0).Child("attributes").Key(string(resources.AttrRDMADev)), "x", "too long")})
	r.p.HandleError(context.Background(), fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, other), "publishing")
	assert.Zero(t, r.asked.Load())
	r.scan(t)
	list, _ = form(r.rec)
	assert.Equal(t, 32, list)
}

// run is a publisher of TestNUMAListFallsBack, with what it did.
type run struct {
	p       *publishing.Publisher
	rec     *drivertest.Recorder
	stopped *atomic.Value
	asked   *atomic.Int32
}

// scan builds a snapshot with the publisher's configuration, as the
// plugin's scans do, and publishes it.
func (r run) scan(t *testing.T) {
	t.Helper()
	_, err := r.p.Publish(context.Background(), snapshot(t, full(t), r.p.Config(), nil, nil))
	require.NoError(t, err)
}

// withdrawRecorder is a target that can withdraw, as Slices.
type withdrawRecorder struct {
	drivertest.Recorder
	release   chan struct{} // Withdraw returns once it is closed
	withdrawn chan struct{}
}

func (w *withdrawRecorder) Withdraw(context.Context) error {
	<-w.release
	close(w.withdrawn)
	return nil
}

// TestDroppedCountersWithdrawn: when the API server drops mixed mode's
// counters, the publisher withdraws the slices it published (as stored
// they let a group and its members be allocated together) before it stops
// the plugin.
func TestDroppedCountersWithdrawn(t *testing.T) {
	t.Parallel()
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
	cfg := resources.Config{NodeName: node, Groups: resources.GroupsMixed}
	p, _ := newPublisher(cfg, func(o *publishing.PublisherOptions) { o.Stop = stop })
	p.SetTarget(pub)
	_, err := p.Publish(context.Background(), snapshot(t, full(t), cfg, nil, nil))
	require.NoError(t, err)
	require.NotZero(t, pub.Count())

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
	n := pub.Count()
	published, err := p.Publish(context.Background(), snapshot(t, portDown(t, "50"), cfg, nil, nil))
	require.NoError(t, err)
	assert.False(t, published, "nothing published once stopping")
	assert.Equal(t, n, pub.Count())
}

// TestNoneEffectFallsBack: an API server from before the taint effect
// None refuses a slice with a degraded device's taint; the publisher
// publishes degraded devices unmarked from the next publish on, and keeps
// the unhealthy ones' taints.
func TestNoneEffectFallsBack(t *testing.T) {
	t.Parallel()
	var stopped error
	asked := 0
	cfg := resources.Config{NodeName: node}
	p, m := newPublisher(cfg, func(o *publishing.PublisherOptions) {
		o.Stop = func(err error) { stopped = err }
		o.AskRescan = func() { asked++ }
	})
	rec := &drivertest.Recorder{}
	p.SetTarget(rec)
	// 4f degraded, 50 unhealthy, as the health checks grade them.
	verdicts := map[string]health.Verdict{
		"efa-0000-4f-00-0": {Grade: health.Degraded, Reason: "impaired-remote", Message: "20 impaired remote connection events"},
		"efa-0000-50-00-0": {Grade: health.Unhealthy, Reason: "admin-timeouts", Message: "2 admin commands timed out"},
	}
	snap := snapshot(t, full(t), cfg, nil, verdicts)
	_, err := p.Publish(context.Background(), snap)
	require.NoError(t, err)
	require.Len(t, rec.LastDevices()["efa-0000-4f-00-0"].Taints, 1)
	assert.Equal(t, resourceapi.DeviceTaintEffectNone, rec.LastDevices()["efa-0000-4f-00-0"].Taints[0].Effect)

	// kube-apiserver's validation of an effect it does not know.
	path := field.NewPath("spec", "devices").Index(0).Child("taints").Index(0).Child("effect")
	refusal := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "n-0",
		field.ErrorList{field.NotSupported(path, resourceapi.DeviceTaintEffectNone, []string{"NoSchedule", "NoExecute"})})
	p.HandleError(context.Background(), fmt.Errorf("%w: create resource slice: %w", kubeletplugin.ErrRecoverable, refusal), "publishing")
	require.NoError(t, stopped)
	assert.Equal(t, 1, asked, "a scan asked for, to publish without the effect")
	published, err := p.Publish(context.Background(), snap)
	require.NoError(t, err)
	require.True(t, published, "the same snapshot, published without the effect")
	devs := rec.LastDevices()
	assert.Empty(t, devs["efa-0000-4f-00-0"].Taints, "degraded, unmarked")
	assert.Equal(t, "admin-timeouts", devs["efa-0000-50-00-0"].Taints[0].Value, "unhealthy, still tainted")
	assert.Equal(t, 1.0, value(t, m.Health.Degraded.WithLabelValues("none")))
	assert.Equal(t, 0.0, value(t, m.Health.Degraded.WithLabelValues("taint")))
	assert.Equal(t, 1.0, value(t, m.Health.Unhealthy.WithLabelValues("taint")))
}

// TestUnhealthyWithheld: an unhealthy EFA is published with a NoSchedule
// taint; where the API server drops taints it is withheld from the slice
// instead, the metric says how, and it is back once healthy.
func TestUnhealthyWithheld(t *testing.T) {
	t.Parallel()
	cfg := resources.Config{NodeName: node}
	p, m := newPublisher(cfg)
	rec := &drivertest.Recorder{}
	p.SetTarget(rec)
	ctx := context.Background()
	down := snapshot(t, portDown(t, "50"), cfg, nil, nil)
	_, err := p.Publish(ctx, down)
	require.NoError(t, err)
	devs := rec.LastDevices()
	require.Len(t, devs, 32)
	assert.Equal(t, []resourceapi.DeviceTaint{{Key: "dra.net/unhealthy", Value: "port-not-active", Effect: resourceapi.DeviceTaintEffectNoSchedule}}, devs["efa-0000-50-00-0"].Taints)
	assert.Equal(t, 1.0, value(t, m.Health.Unhealthy.WithLabelValues("taint")))

	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "x", Taints: devs["efa-0000-50-00-0"].Taints}}}}
	actual := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "x"}}}}
	p.HandleError(ctx, &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: desired, ActualSlice: actual}, "publish")
	_, err = p.Publish(ctx, down)
	require.NoError(t, err)
	devs = rec.LastDevices()
	assert.Len(t, devs, 31)
	assert.NotContains(t, devs, "efa-0000-50-00-0")
	assert.Equal(t, 1.0, value(t, m.Health.Unhealthy.WithLabelValues("withhold")))
	assert.Equal(t, 0.0, value(t, m.Health.Unhealthy.WithLabelValues("taint")))

	_, err = p.Publish(ctx, snapshot(t, full(t), cfg, down, nil))
	require.NoError(t, err)
	assert.Len(t, rec.LastDevices(), 32)
}

// TestPublishedResourcesTaint: efakit slices (resources.Published) prints
// what the publisher publishes of a first scan, the unhealthy EFA's taint
// included.
func TestPublishedResourcesTaint(t *testing.T) {
	t.Parallel()
	fsys := portDown(t, "50")
	topo, err := topology.Scan(fsys)
	require.NoError(t, err)
	cfg := resources.Config{NodeName: node}
	res, err := resources.Published(topo, cfg)
	require.NoError(t, err)
	printed := map[string]resourceapi.Device{}
	tainted := map[string]string{}
	for _, s := range res.Slices {
		for _, d := range s.Devices {
			printed[d.Name] = d
			for _, tn := range d.Taints {
				tainted[d.Name] = tn.Key + "=" + tn.Value + ":" + string(tn.Effect)
			}
		}
	}
	assert.Equal(t, map[string]string{"efa-0000-50-00-0": "dra.net/unhealthy=port-not-active:NoSchedule"}, tainted)

	p, _ := newPublisher(cfg)
	rec := &drivertest.Recorder{}
	p.SetTarget(rec)
	_, err = p.Publish(context.Background(), snapshot(t, fsys, cfg, nil, nil))
	require.NoError(t, err)
	assert.Equal(t, printed, rec.LastDevices())
}

// TestLogPublishSaysWhat: every publish says what changed (devices tainted,
// untainted, removed, added), and one caused by a scan with errors names
// them; a snapshot that changes nothing is not published, and says
// nothing.
func TestLogPublishSaysWhat(t *testing.T) {
	t.Parallel()
	cfg := resources.Config{NodeName: node}
	p, _ := newPublisher(cfg)
	p.SetTarget(&drivertest.Recorder{})
	ctx, logged := drivertest.Logger(t)
	var prev *inventory.Snapshot
	scan := func(fsys *sysfs.MemFS) {
		s := snapshot(t, fsys, cfg, prev, nil)
		prev = s
		_, _ = p.Publish(ctx, s)
	}
	scan(full(t))
	scan(portDown(t, "50"))
	scan(portDown(t, "50")) // nothing changed: no line
	scan(full(t))
	scan(edit(t, func(e *sysfs.Entry) bool { return !strings.Contains(e.Path, "0000:4f:00.0") }))
	// A damaged file: the EFA at 51:00.0 is left out, and the scan's
	// error is named by the publish it causes.
	scan(edit(t, func(e *sysfs.Entry) bool {
		if strings.HasSuffix(e.Path, "0000:51:00.0/infiniband/rdmap81s0/ports/1/rate") {
			e.Data = []byte("fast\n")
		}
		return true
	}))

	var got []map[string]any
	for _, e := range drivertest.Entries(logged(), "Published") {
		got = append(got, drivertest.KV(e))
	}
	require.Len(t, got, 5)
	assert.Equal(t, map[string]any{"devices": 32, "first": true}, got[0])
	assert.Equal(t, map[string]any{"devices": 32, "tainted": []string{"efa-0000-50-00-0=port-not-active"}}, got[1])
	assert.Equal(t, map[string]any{"devices": 32, "untainted": []string{"efa-0000-50-00-0"}}, got[2])
	assert.Equal(t, map[string]any{"devices": 31, "removed": []string{"efa-0000-4f-00-0"}}, got[3])
	assert.Equal(t, []string{"efa-0000-4f-00-0"}, got[4]["added"])
	assert.Contains(t, got[4]["scanErrors"], "0000:51:00.0")
	assert.Len(t, logged(), 5, "nothing else is logged")
}
