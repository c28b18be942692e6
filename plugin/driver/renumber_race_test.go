package driver_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// generations are the p5 fixture after g module reloads, g = 0..n-1: each
// reload gives every uverbs device a number no earlier one had (uverbs<k>
// becomes uverbs<k+32g>), so that no prepare is refused for a number an
// earlier generation's containers hold, and every claim must end with its
// EFA's number of the last generation.
func generations(t *testing.T, n int) []*sysfs.MemFS {
	t.Helper()
	out := make([]*sysfs.MemFS, n)
	for g := range n {
		to := map[int]int{}
		for k := range 32 {
			to[k] = k + 32*g
		}
		out[g] = renumbered(t, to)
	}
	return out
}

// efaNumbers maps each EFA of fsys (published name) to its uverbs device
// number, as sysfs has it.
func efaNumbers(t *testing.T, fsys fs.ReadLinkFS) map[string]string {
	t.Helper()
	topo, err := topology.Scan(fsys)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range topo.Of(topology.KindEFA) {
		out[resources.DeviceName(d.PCI.Address)] = fmt.Sprintf("%d:%d", d.EFA.Verbs.Major, d.EFA.Verbs.Minor)
	}
	return out
}

// claimNumbers maps each prepared claim's EFA to the device number its
// checkpoint record and its CDI spec give, failing where the two differ.
func claimNumbers(t *testing.T, store *checkpoint.Store, w *cdi.Writer) (map[string]string, error) {
	t.Helper()
	st, err := store.Load(bootA)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for uid, c := range st.Claims {
		spec, err := w.Load(uid)
		if err != nil {
			return nil, err
		}
		for _, d := range c.Devices {
			rec := fmt.Sprintf("%d:%d", d.Major, d.Minor)
			inSpec := ""
			for _, sd := range spec.Devices {
				for _, n := range sd.ContainerEdits.DeviceNodes {
					inSpec = fmt.Sprintf("%d:%d", n.Major, n.Minor)
				}
			}
			if inSpec != rec {
				return nil, fmt.Errorf("claim %s: checkpoint %s, spec %s", c.Name, rec, inSpec)
			}
			out[d.Device] = rec
		}
	}
	return out, nil
}

// gatedSync is an fsync that a test can hold: while held, each call waits
// until released.
type gatedSync struct {
	mu      sync.Mutex
	held    chan struct{} // closed to release; nil when not held
	entered chan struct{} // receives when a call waits
}

func (g *gatedSync) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held, g.entered = make(chan struct{}), make(chan struct{}, 1)
}

func (g *gatedSync) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.held)
	g.held = nil
}

func (g *gatedSync) sync(f *os.File) error {
	g.mu.Lock()
	held, entered := g.held, g.entered
	g.mu.Unlock()
	if held != nil {
		entered <- struct{}{}
		<-held
	}
	return f.Sync()
}

// prepareAsKubelet prepares c, and prepares it again, as the kubelet does
// on the pod's next sync, while the prepare fails because the EFA is not
// in the inventory: a scan that ran while the module reloaded (here, while
// the test swapped generations under it) saw the device half gone, as it
// is in sysfs for that moment, and the next scan finds it back; or the
// prepare's own read of sysfs found the uverbs device of the number the
// scan saw gone (renumbered since). Any other error ends it.
func prepareAsKubelet(p *driver.Plugin, c *resourceapi.ResourceClaim) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
		if err != nil {
			return err
		}
		err = res[c.UID].Err
		midReload := err != nil && (strings.Contains(err.Error(), "is not on this node") || strings.Contains(err.Error(), "file does not exist"))
		if !midReload || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPrepareAndRenumberRace: prepares and the scans that find the uverbs
// devices renumbered (module reloads), interleaved, leave every prepared
// claim with the number its EFA has at the end, in its checkpoint record
// and its CDI spec. The scans take no lock a prepare holds, so one may
// store its snapshot while a prepare that read the old numbers is still
// saving; whichever of the two comes second sees the other (a scan checks
// the saved claims after it stored its snapshot, a prepare the newest
// snapshot after it saved) and the correction follows through Run. No
// periodic or health scan runs: nothing else would correct a claim.
func TestPrepareAndRenumberRace(t *testing.T) {
	t.Parallel()
	gens := generations(t, 8)
	start := func(t *testing.T) (*driver.Plugin, *swapFS, *checkpoint.Store, *cdi.Writer, *gatedSync) {
		s := &swapFS{}
		s.cur.Store(gens[0])
		w, err := cdi.NewWriter(t.TempDir(), "dra.net")
		require.NoError(t, err)
		gate := &gatedSync{}
		dir := t.TempDir()
		store := checkpoint.NewStore(dir)
		store.Sync = gate.sync
		p, err := driver.NewPlugin(context.Background(), driver.PluginOptions{
			Config: resources.Config{NodeName: node}, SysfsRoot: s, CDI: w, Store: store, BootID: bootA,
		})
		require.NoError(t, err)
		_, err = p.Rescan(context.Background())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		runDone := make(chan struct{})
		go func() { defer close(runDone); p.Run(ctx, time.Hour) }()
		t.Cleanup(func() { cancel(); <-runDone })
		return p, s, checkpoint.NewStore(dir), w, gate
	}
	// settled waits for every claim to have its EFA's number in fsys.
	settled := func(t *testing.T, store *checkpoint.Store, w *cdi.Writer, fsys fs.ReadLinkFS, claims int) {
		t.Helper()
		want := efaNumbers(t, fsys)
		// Polled in this goroutine: what it found last is read after.
		var last string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			last = ""
			got, err := claimNumbers(t, store, w)
			if err != nil {
				last = err.Error()
			}
			for dev, num := range got {
				if want[dev] != num {
					last += fmt.Sprintf("%s has %s, its EFA %s; ", dev, num, want[dev])
				}
			}
			if err == nil && len(got) != claims {
				last += fmt.Sprintf("%d claims prepared, want %d", len(got), claims)
			}
			if last == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("claims not corrected: %s", last)
				return
			}
		}
	}
	devices := func(t *testing.T) []string {
		var out []string
		for name := range efaNumbers(t, gens[0]) {
			out = append(out, name)
		}
		return out
	}

	t.Run("a scan stores its snapshot while a prepare saves", func(t *testing.T) {
		t.Parallel()
		p, s, store, w, gate := start(t)
		c := claim("held", "c0000000-0000-0000-0000-000000000001", "efa-0000-4f-00-0")
		gate.hold()
		prepared := make(chan kubeletplugin.PrepareResult, 1)
		go func() {
			res, _ := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			prepared <- res[c.UID]
		}()
		<-gate.entered // the prepare read generation 0 and is saving it
		s.cur.Store(gens[1])
		_, err := p.Rescan(context.Background())
		require.NoError(t, err)
		gate.release()
		require.NoError(t, (<-prepared).Err)
		settled(t, store, w, gens[1], 1)
	})

	t.Run("interleaved", func(t *testing.T) {
		t.Parallel()
		p, s, store, w, _ := start(t)
		devs := devices(t)
		var wg sync.WaitGroup
		// Two kubelet callers, each preparing its half of the EFAs one
		// claim at a time.
		for k := range 2 {
			wg.Go(func() {
				for i := k; i < len(devs); i += 2 {
					c := claim(fmt.Sprintf("c%d", i), fmt.Sprintf("c0000000-0000-0000-0000-%012d", i), devs[i])
					assert.NoError(t, prepareAsKubelet(p, c), devs[i])
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				}
			})
		}
		// The module reloaded again and again meanwhile, each reload seen
		// by a scan, as the kernel's uevents ask for one.
		wg.Go(func() {
			for g := 1; g < len(gens); g++ {
				time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
				s.cur.Store(gens[g])
				_, err := p.Rescan(context.Background())
				assert.NoError(t, err)
			}
		})
		wg.Wait()
		settled(t, store, w, gens[len(gens)-1], len(devs))
	})
}
