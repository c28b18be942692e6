package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// TestKubeletRollingUpdate: two plugin instances share a node's directories
// during a rolling update; a claim one prepares is known to the other.
func TestKubeletRollingUpdate(t *testing.T) {
	c := claim("handover", "13131313-1313-1313-1313-131313131313", "efa-0000-4f-00-0")
	other := claim("other", "14141414-1414-1414-1414-141414141414", "efa-0000-4f-00-0")
	n := newNode(t, p5, c, other)
	ctx := context.Background()
	mk := func() *driver.Plugin {
		root, err := sysfs.OpenCapture(p5)
		require.NoError(t, err)
		w, err := cdi.NewWriter(n.cdiDir(), "dra.net")
		require.NoError(t, err)
		p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w,
			Store: checkpoint.NewStore(filepath.Join(n.dir, "plugins", "dra.net")), BootID: bootA})
		require.NoError(t, err)
		_, err = p.Rescan(ctx)
		require.NoError(t, err)
		return p
	}
	oldPod, newPod := mk(), mk()
	res, err := oldPod.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	// The new pod, started before, must not hand the same EFA out again.
	res, err = newPod.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{other})
	require.NoError(t, err)
	assert.ErrorContains(t, res[other.UID].Err, "already prepared for claim "+c.Namespace+"/"+c.Name+" ("+string(c.UID)+")")
	assert.Equal(t, []string{string(c.UID)}, newPod.Prepared())
}

func TestKubeletRestarts(t *testing.T) {
	c := claim("kept", "55555555-5555-5555-5555-555555555555", "efa-0000-93-00-0", "efa-0000-94-00-0")
	n := newNode(t, p5, c)
	n.start()
	r := n.prepare(c)[string(c.UID)]
	require.Empty(t, r.Error)
	want, _ := n.specNodes(string(c.UID))
	n.stop()

	t.Run("plugin restart between prepare and unprepare", func(t *testing.T) {
		n.start()
		again := n.prepare(c)[string(c.UID)]
		assert.Equal(t, r.String(), again.String())
		n.stop()
	})
	t.Run("CDI directory wiped (tmpfs) while the kubelet believes the claim prepared", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(n.cdiDir()))
		require.NoError(t, os.MkdirAll(n.cdiDir(), 0o755))
		n.start()
		got, _ := n.specNodes(string(c.UID))
		assert.Equal(t, want, got, "the spec is back before any call")
		// A container restart injects every CDI device the prepare result
		// named, the helper's device-metadata spec included; before, this
		// failed with "unresolvable CDI devices dra.net/metadata=<uid>_efa".
		var ids []string
		for _, d := range r.Devices {
			ids = append(ids, d.CdiDeviceIds...)
		}
		require.Contains(t, ids, "dra.net/metadata="+string(c.UID)+"_efa")
		g, err := drivertest.Inject(t, n.cdiDir(), nil, ids)
		require.NoError(t, err)
		assert.Len(t, g.Nodes, 2)
		assert.Contains(t, g.Mounts, "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/kept/efa/dra.net-metadata.json")
		n.stop()
	})
	t.Run("corrupt checkpoint: reported, not a crash loop", func(t *testing.T) {
		cp := filepath.Join(n.dir, "plugins", "dra.net", "checkpoint.json")
		require.NoError(t, os.WriteFile(cp, []byte("{not json"), 0o600))
		n.start()
		c2 := claim("after", "66666666-6666-6666-6666-666666666666", "efa-0000-a4-00-0")
		n.addClaim(c2)
		assert.Empty(t, n.prepare(c2)[string(c2.UID)].Error)
		n.unprepare(c2)
		n.stop()
		moved, err := filepath.Glob(cp + ".corrupt*")
		require.NoError(t, err)
		assert.NotEmpty(t, moved, "the bad file is kept for inspection")
	})
	t.Run("new boot ID drops state from before the reboot", func(t *testing.T) {
		n.start()
		assert.Empty(t, n.prepare(c)[string(c.UID)].Error)
		n.stop()
		n.setBootID(bootB)
		n.start()
		defer n.stop()
		// The claim is no longer held: its EFAs can be prepared for
		// another claim, as the kubelet does after a reboot.
		c3 := claim("reboot", "77777777-7777-7777-7777-777777777777", "efa-0000-93-00-0")
		n.addClaim(c3)
		assert.Empty(t, n.prepare(c3)[string(c3.UID)].Error)
	})
}
