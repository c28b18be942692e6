package driver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// TestClaimStatusGPUDirect: a prepared claim's status names each of its
// EFA's GPU pairs with their GPUDirect readiness, and follows the NVIDIA
// driver when it changes: the P6e case NVIDIA/aicr measured, blocked under
// R595, ready once the node runs R580 with the override.
func TestClaimStatusGPUDirect(t *testing.T) {
	t.Parallel()
	m := gdrcases.Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g", NVIDIA: "595.91.07"}
	s := &swapFS{}
	s.cur.Store(m.Build().FS())
	proc := fstest.MapFS{
		"sys/kernel/osrelease": {Data: []byte("6.1.119-129.201.amzn2023.aarch64\n")},
		"driver/nvidia/params": {Data: []byte("ModifyDeviceFiles: 1\nGrdmaPciTopoCheckOverride: 1\n")},
	}
	c := claim("gdr", "c4000000-0000-0000-0000-000000000001", "efa-0000-97-00-0")
	client := fake.NewClientset(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	w, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "dra.net")
	require.NoError(t, err)
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{
		Config:    resources.Config{NodeName: node},
		SysfsRoot: s, ProcRoot: proc, CDI: w, Store: checkpoint.NewStore(filepath.Join(dir, "data")), BootID: bootA,
		StatusClient: client,
	})
	require.NoError(t, err)
	statusDone := make(chan struct{})
	go func() { p.StatusWriter().Run(ctx); close(statusDone) }()
	defer func() { cancel(); <-statusDone }()
	p.SetPublisher(&recorder{})
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)

	gdr := func() []claimstatus.GPUDirectData {
		e, ok := claimEntries(t, client, c)["dra.net/efa-0000-97-00-0"]
		if !ok || e.Data == nil {
			return nil
		}
		var d claimstatus.EFAData
		require.NoError(t, json.Unmarshal(e.Data.Raw, &d))
		return d.GPUDirect
	}
	blocked := []claimstatus.GPUDirectData{{GPU: "0000:9d:00.0", Link: "NODE", Status: "blocked",
		NotReady: []string{"dma-buf nvidia-topology-check: blocked", "peer-memory efa-peer-memory: blocked"}}}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(blocked, gdr()) }, 10*time.Second, 10*time.Millisecond, "gpuDirect: %+v", gdr())

	// The node moves to R580 with the override: the next scan says ready.
	m.NVIDIA = "580.173.02"
	s.cur.Store(m.Build().FS())
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	ready := []claimstatus.GPUDirectData{{GPU: "0000:9d:00.0", Link: "NODE", Status: "ready", ReadyBy: []string{"dma-buf"},
		NotReady: []string{"peer-memory efa-peer-memory: blocked"}}}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(ready, gdr()) }, 10*time.Second, 10*time.Millisecond, "gpuDirect: %+v", gdr())
}
