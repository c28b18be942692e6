package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// TestKillDuringPrepare kills the real plugin binary (SIGKILL) at random
// moments while prepares and unprepares run, starts it again, and checks
// after each start that the files match the checkpoint: every prepared
// claim has its spec, no spec or metadata spec of a claim the checkpoint
// does not hold is left, no temporary file is left, and the checkpoint
// reads.
func TestKillDuringPrepare(t *testing.T) {
	c := harness.APIServer(t)
	ctx := context.Background()
	n := harness.NewE2ENode(t, c, "p5-crash", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone)
	n.Slices(32)
	// Eight claims of four EFAs each, allocated as the scheduler would.
	var claims []*resourceapi.ResourceClaim
	for k := range 8 {
		spec := resourceapi.ResourceClaimSpec{}
		spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efas", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "efa.networking.k8s.aws", Count: 4}}}
		cl, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crash-%d", k)}, Spec: spec}, metav1.CreateOptions{})
		require.NoError(t, err)
		cl.Status.Allocation = &resourceapi.AllocationResult{}
		for j := range 4 {
			cl.Status.Allocation.Devices.Results = append(cl.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "efas", Driver: "dra.net", Pool: n.Name, Device: fmt.Sprintf("efa-0000-%02x-00-0", 0x4f+0x11*k+j)})
		}
		cl, err = c.Client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, cl, metav1.UpdateOptions{})
		require.NoError(t, err)
		claims = append(claims, cl)
	}
	dataDir := filepath.Join(n.Dir, "plugins", "dra.net")
	rounds, calls := 12, 0
	for round := range rounds {
		// Calls as the kubelet makes them, until the kill breaks them.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(round), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				cl := claims[r.IntN(len(claims))]
				ref := []*drapb.Claim{{Namespace: cl.Namespace, Name: cl.Name, Uid: string(cl.UID)}}
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if r.IntN(2) == 0 {
					_, _ = n.DRA.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
				} else {
					_, _ = n.DRA.NodeUnprepareResources(cctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
				}
				cancel()
				mu.Lock()
				calls++
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
		require.NoError(t, n.Proc.Process.Kill())
		_, _ = n.Proc.Process.Wait()
		n.Proc = nil
		close(stop)
		wg.Wait()
		for _, conn := range n.Conns {
			conn.Close()
		}
		n.Start()

		st, err := checkpoint.NewStore(dataDir).Load("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11")
		require.NoError(t, err, "round %d: the checkpoint reads", round)
		var want []string
		for uid := range st.Claims {
			want = append(want, uid)
		}
		slices.Sort(want)
		files, err := n.CDI.List()
		require.NoError(t, err)
		assert.Equal(t, want, files.Specs, "round %d: a spec for each prepared claim and no other", round)
		for uid := range files.Metadata {
			assert.Contains(t, want, uid, "round %d: metadata spec of claim %s", round, uid)
		}
		assert.Empty(t, files.Temp, "round %d", round)
		ents, err := os.ReadDir(dataDir)
		require.NoError(t, err)
		for _, e := range ents {
			assert.False(t, strings.HasSuffix(e.Name(), ".tmp"), "round %d: %s left in the data directory", round, e.Name())
		}
	}
	t.Logf("%d rounds, %d kubelet calls interrupted or completed", rounds, calls)
}
