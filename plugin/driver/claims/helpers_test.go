package claims_test

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claims"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// These tests drive the claim state (claims.State) as the plugin does
// (driver.Plugin: NewPlugin, its kubelet calls and its scans), without
// the plugin: a state loaded from a checkpoint store and a CDI directory,
// handed the inventory snapshot of a scan of a sysfs fixture.

const (
	node  = "node-1"
	bootA = "8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11"
	p5    = "../../../testdata/sysfs/p5.48xlarge.sysfs"
)

// swapFS is a sysfs whose content a test replaces between scans, as
// hot-unplug or a module reload changes a live /sys.
type swapFS struct{ cur atomic.Pointer[sysfs.MemFS] }

func (s *swapFS) Open(n string) (fs.File, error)      { return s.cur.Load().Open(n) }
func (s *swapFS) ReadLink(n string) (string, error)   { return s.cur.Load().ReadLink(n) }
func (s *swapFS) Lstat(n string) (fs.FileInfo, error) { return s.cur.Load().Lstat(n) }

// swapped is a swapFS holding fsys.
func swapped(fsys *sysfs.MemFS) *swapFS {
	s := &swapFS{}
	s.cur.Store(fsys)
	return s
}

// capture is the p5 fixture in memory.
func capture(t testing.TB) *sysfs.MemFS {
	t.Helper()
	r, err := sysfs.OpenCapture(p5)
	require.NoError(t, err)
	return r.ReadLinkFS.(*sysfs.MemFS)
}

// edit returns the p5 fixture with f applied to each entry (false drops it).
func edit(t testing.TB, f func(e *sysfs.Entry) bool) *sysfs.MemFS { return drivertest.Edit(t, p5, f) }

// renumbered is the p5 fixture after a module reload renumbered its uverbs
// devices (drivertest.Renumbered).
func renumbered(t testing.TB, to map[int]int) *sysfs.MemFS { return drivertest.Renumbered(t, p5, to) }

// portDown is the p5 fixture with the port of the EFA at bus:00.0 DOWN.
func portDown(t testing.TB, bus string) *sysfs.MemFS {
	return edit(t, func(e *sysfs.Entry) bool {
		if regexp.MustCompile(`0000:` + bus + `:00\.0/infiniband/[^/]+/ports/1/state$`).MatchString(e.Path) {
			e.Data = []byte("1: DOWN\n")
		}
		return true
	})
}

// claim is a ResourceClaim the scheduler allocated the named EFAs to.
func claim(name string, uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "efa", Driver: "dra.net", Pool: node, Device: d})
	}
	return c
}

// dirs are a node's CDI and data directories, shared by the claim states
// of one test (a restart, the two plugin pods of a rolling update).
type dirs struct{ cdi, data string }

func newDirs(t *testing.T) dirs { return dirs{cdi: t.TempDir(), data: t.TempDir()} }

// setup is what a claim state is loaded with, as NewPlugin hands it to
// claims.Load, and what its scans are made with.
type setup struct {
	cfg   resources.Config
	files claims.Files
	deps  claims.Deps
	// proc is the proc root of the GPUDirect judgement (nil for none).
	proc fs.FS
	ctx  context.Context
}

// newSetup is the setup of a node on fsys with its directories d, the
// data directory its lock file's and the helper's (as Serve has it).
func newSetup(t *testing.T, fsys fs.ReadLinkFS, d dirs) setup {
	t.Helper()
	w, err := cdi.NewWriter(d.cdi, "dra.net")
	require.NoError(t, err)
	return setup{cfg: resources.Config{NodeName: node}, ctx: context.Background(),
		files: claims.Files{CDI: w, Store: checkpoint.NewStore(d.data), BootID: bootA, DataDir: d.data, Sysfs: fsys},
		deps:  claims.Deps{Metrics: metrics.New()}}
}

// state is a claim state with the snapshot of the last scan the test
// made, as the Plugin holds them.
type state struct {
	t *testing.T
	setup
	*claims.State
	snap   *inventory.Snapshot
	grader *health.Tracker
}

// load loads the claim state (claims.Load) and scans sysfs once.
func (s setup) load(t *testing.T) (*state, error) {
	t.Helper()
	st, err := claims.Load(s.ctx, s.files, claims.Node{Driver: s.cfg.Driver(), Name: s.cfg.NodeName}, s.deps)
	if st == nil {
		return nil, err
	}
	n := &state{t: t, setup: s, State: st, snap: inventory.Empty(), grader: health.NewTracker(health.DefaultPolicy())}
	n.scan()
	return n, err
}

// start loads the claim state, requiring no error.
func (s setup) start(t *testing.T) *state {
	t.Helper()
	n, err := s.load(t)
	require.NoError(t, err)
	return n
}

// startOn is newSetup(t, fsys, d).start(t), the setups changed by mods.
func startOn(t *testing.T, fsys fs.ReadLinkFS, d dirs, mods ...func(*setup)) *state {
	t.Helper()
	s := newSetup(t, fsys, d)
	for _, m := range mods {
		m(&s)
	}
	return s.start(t)
}

// scan replaces the snapshot with one of sysfs as it is now, as the
// Plugin's Rescan builds it (health graded, GPUDirect judged with the
// proc root), and does nothing else.
func (n *state) scan() {
	t := n.t
	t.Helper()
	start := time.Now()
	topo, scanErr := placed.Scan(n.files.Sysfs, false)
	verdicts := resources.Grade(topo, n.grader, resources.CountersOf(nil), start)
	snap, _, err := inventory.Build(topo, scanErr, n.cfg, n.snap, verdicts)
	require.NoError(t, err)
	if len(topo.Of(topology.KindGPU)) > 0 {
		gn, _ := gpudirect.ReadNode(n.files.Sysfs, n.proc)
		snap.GPUDirect = map[string][]gpudirect.Pair{}
		for _, x := range gpudirect.Assess(topo, gn) {
			k := x.EFA.PCI.Address.String()
			snap.GPUDirect[k] = append(snap.GPUDirect[k], x)
		}
	}
	n.snap = snap
}

// rescan is a scan and what the Plugin's Rescan then asks of the claim
// state: the correction of renumbered EFAs, then the claims' status.
func (n *state) rescan() {
	n.t.Helper()
	n.scan()
	if n.Renumbered(n.ctx, n.snap) {
		require.NoError(n.t, n.RepairSpecs(n.ctx))
	}
	n.SyncStatus(n.snap)
}

// prepare prepares the claims in one kubelet call on the last snapshot.
func (n *state) prepare(cs ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	return n.Prepare(n.ctx, n.snap, cs)
}

// prepareOne prepares c alone.
func (n *state) prepareOne(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	return n.prepare(c)[c.UID]
}

// unprepare unprepares the claims in one kubelet call.
func (n *state) unprepare(cs ...*resourceapi.ResourceClaim) map[types.UID]error {
	var refs []kubeletplugin.NamespacedObject
	for _, c := range cs {
		refs = append(refs, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID})
	}
	return n.Unprepare(n.ctx, refs)
}

// metric is the value of the counter name in the state's metrics.
func (n *state) metric(name string) float64 {
	n.t.Helper()
	mfs, err := n.deps.Metrics.Registry.Gather()
	require.NoError(n.t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	n.t.Fatalf("no metric %s", name)
	return 0
}

// specNodesOf is the device nodes of a claim's CDI spec, "path major:minor".
func specNodesOf(t *testing.T, w *cdi.Writer, uid types.UID) []string {
	t.Helper()
	spec, err := w.Load(string(uid))
	require.NoError(t, err)
	var out []string
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			out = append(out, fmt.Sprintf("%s %d:%d", n.Path, n.Major, n.Minor))
		}
	}
	return out
}

// nodeEvents lists the Events written so far, oldest first.
func nodeEvents(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}
