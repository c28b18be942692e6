package e2e

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// publishedCount is how many dra.net devices the plugin publishes for a
// fixture in a group mode.
func publishedCount(t *testing.T, fixture string, mode resources.GroupMode) int {
	topo := harness.ScanFixture(t, fixture)
	res, err := resources.Published(topo, resources.Config{NodeName: "n", Groups: mode})
	require.NoError(t, err)
	count := 0
	for _, s := range res.Slices {
		count += len(s.Devices)
	}
	return count
}

// runTemplates runs, on the real node, one pod per template `efakit
// claims` prints for the fixture in the plugin's group mode, then its
// whole-node pod, and checks what each container got.
func (n *realNode) runTemplates(t *testing.T, fixture string, mode resources.GroupMode, nodes efaNodes) {
	// Per fixture and mode: templates of one fixture do not fit another.
	prefix := strings.SplitN(filepath.Base(fixture), ".", 2)[0] + "-" + harness.ModeFlag(mode) + "-"
	tms, all := harness.CreateTemplates(t, n.CP, fixture, mode, prefix)
	var names []string
	for name := range tms {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			pod := n.PrinterPod(prefix+name, harness.TemplateClaim("c", prefix+name))
			got, claims := n.run(t, pod)
			require.NotEmpty(t, got.Nodes)
			n.check(t, got, nodes, claimsOf(claims), nil)
			n.deletePod(t, pod.Name)
		})
	}
	if all != nil {
		t.Run("all-pod", func(t *testing.T) {
			pod := n.PrinterPod(prefix+"all-pod", all.Pod.Spec.ResourceClaims...)
			got, claims := n.run(t, pod)
			assert.Len(t, got.Nodes, len(nodes.byAddr), "every EFA of the node")
			n.check(t, got, nodes, claimsOf(claims), nil)
			n.deletePod(t, pod.Name)
		})
	}
}

// TestRealNodeTemplates: on p5en and trn2 nodes, in every group mode, the
// templates `efakit claims` prints run as pods through the real kubelet,
// containerd and runc, and each container holds exactly its allocation:
// single EFAs, group devices (every EFA of the group's PCIe root), the
// accelerators beside them, and metadata naming them. On trn2, the users'
// aligned-efa-neuron too: four Neuron devices with the four EFAs of their
// device group.
func TestRealNodeTemplates(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	for _, fixture := range []string{"../../testdata/sysfs/p5en.48xlarge.sysfs", trn2Fixture} {
		t.Run(fixture[len("../../testdata/sysfs/"):], func(t *testing.T) {
			n := startRealNode(t, c)
			n.EnsureNamespace()
			accel := n.StartAccelDriver(fixture)
			require.NotEmpty(t, accel)
			nodes := fixtureNodes(t, fixture)
			for _, mode := range []resources.GroupMode{resources.GroupsNone, resources.GroupsExclusive, resources.GroupsMixed} {
				t.Run(harness.ModeFlag(mode), func(t *testing.T) {
					n.StartEFAKit(fixture, "--set", "groups="+harness.ModeFlag(mode))
					defer n.KillEFAKit(syscall.SIGTERM)
					n.WaitEFAs(t, publishedCount(t, fixture, mode))
					n.runTemplates(t, fixture, mode, nodes)
					if fixture == trn2Fixture && mode == resources.GroupsNone {
						t.Run("users/aligned-efa-neuron", func(t *testing.T) {
							harness.CreateSeed(t, c, "seed-claims-neuron.yaml")
							published := n.PublishedEFAs(t)
							for i := range 4 {
								got, claims := n.run(t, n.PrinterPod(fmt.Sprintf("neuron-%d", i), harness.TemplateClaim("c", "aligned-efa-neuron")))
								cl := claimsOf(claims)
								n.check(t, got, nodes, cl, nil)
								r := byReq(cl[0])
								require.Len(t, r["4-efas"], 4)
								group := *accel[r["4-neurons"][0]].Attributes[resources.AttrGroup4].StringValue
								for _, d := range r["4-neurons"] {
									assert.Equal(t, group, *accel[d].Attributes[resources.AttrGroup4].StringValue)
								}
								for _, e := range r["4-efas"] {
									assert.Equal(t, group, *published[e].Attributes[resources.AttrGroup4].StringValue, "the EFA's devicegroup4_id")
								}
							}
							for i := range 4 {
								n.deletePod(t, fmt.Sprintf("neuron-%d", i))
							}
						})
					}
				})
			}
		})
	}
}
