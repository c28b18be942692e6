package resources_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// cluster is one node of a fixture as the scheduler sees it: efakit's
// slices in a group mode, GPU and Neuron slices of the other drivers, all
// shipped classes, and the devices claims took so far.
type cluster struct {
	t         *testing.T
	topo      *topology.Topology
	slices    []*resourceapi.ResourceSlice
	classes   classes
	features  structured.Features
	allocated sets.Set[structured.DeviceID]
	published map[string]resourceapi.Device
	n         int
}

func newCluster(t *testing.T, path string, mode resources.GroupMode) *cluster {
	t.Helper()
	root, err := sysfs.Open(path)
	require.NoError(t, err)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	cfg := resources.Config{NodeName: node, Groups: mode}
	res, err := resources.Build(topo, cfg)
	require.NoError(t, err)
	c := &cluster{t: t, topo: topo, classes: classes{}, allocated: sets.New[structured.DeviceID](), published: map[string]resourceapi.Device{},
		features: allocfeatures.Scheduler137()}
	c.slices = resources.Slices(res, cfg)
	for i, s := range c.slices {
		s.Name = fmt.Sprintf("%sslice%d", s.GenerateName, i)
	}
	c.slices = append(c.slices, otherDriverSlices(topo)...)
	for _, s := range c.slices {
		for _, d := range s.Spec.Devices {
			c.published[s.Spec.Driver+"/"+d.Name] = d
		}
	}
	for _, cl := range append(resources.DeviceClasses(resources.ClassOptions{}), otherClasses...) {
		c.classes[cl.Name] = cl
	}
	return c
}

// allocate runs the scheduler's allocator for claims on the node; on
// success their devices count as taken for the next call.
func (c *cluster) allocate(claims ...*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	ctx := context.Background()
	alloc, err := structured.NewAllocator(ctx, c.features, structured.AllocatedState{
		AllocatedDevices:         c.allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, c.classes, c.slices, allocfeatures.Cache())
	require.NoError(c.t, err)
	res, err := alloc.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, claims)
	if err != nil || res == nil {
		return res, err
	}
	for _, r := range res {
		for _, d := range r.Devices.Results {
			c.allocated.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
	}
	return res, nil
}

func (c *cluster) claim(tm *resourceapi.ResourceClaimTemplate) *resourceapi.ResourceClaim {
	c.n++
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", tm.Name, c.n), UID: types.UID(fmt.Sprintf("uid-%d", c.n))}}
	cl.Spec = *tm.Spec.Spec.DeepCopy()
	return cl
}

func (c *cluster) attr(r resourceapi.DeviceRequestAllocationResult, name resourceapi.QualifiedName) string {
	d := c.published[r.Driver+"/"+r.Device]
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func byRequest(r resourceapi.AllocationResult) map[string][]resourceapi.DeviceRequestAllocationResult {
	out := map[string][]resourceapi.DeviceRequestAllocationResult{}
	for _, d := range r.Devices.Results {
		out[d.Request] = append(out[d.Request], d)
	}
	return out
}

// TestTemplatesAllocate: every template `efakit claims` prints for a
// machine allocates PerNode times on one node, each time with the right
// members, and not once more; the whole-node pod allocates at once.
func TestTemplatesAllocate(t *testing.T) {
	t.Parallel()
	for name, path := range testfixture.Captures(t, "../../..") {
		for _, mode := range groupModes {
			t.Run(fmt.Sprintf("%s/%s", name, modeName(mode)), func(t *testing.T) {
				t.Parallel()
				probe := newCluster(t, path, mode)
				tms, pod := resources.ClaimTemplates(probe.topo, mode, "")
				if len(probe.topo.Of(topology.KindEFA)) == 0 {
					assert.Empty(t, tms)
					return
				}
				require.NotEmpty(t, tms)
				for _, tm := range tms {
					c := newCluster(t, path, mode)
					for i := range tm.PerNode {
						res, err := c.allocate(c.claim(tm.Template))
						require.NoError(t, err, "%s #%d", tm.Template.Name, i)
						require.Len(t, res, 1, "%s #%d of %d does not fit", tm.Template.Name, i, tm.PerNode)
						if tm.Template.Name != "whole-node" { // all of everything: nothing to pair
							checkPairing(t, c, tm.Template.Name, res[0])
						}
					}
					res, err := c.allocate(c.claim(tm.Template))
					if err == nil {
						assert.Empty(t, res, "%s: one more than %d per node fits: the count is wrong", tm.Template.Name, tm.PerNode)
					}
				}
				if pod != nil {
					c := newCluster(t, path, mode)
					var claims []*resourceapi.ResourceClaim
					for _, pc := range pod.Pod.Spec.ResourceClaims {
						for _, tm := range tms {
							if tm.Template.Name == *pc.ResourceClaimTemplateName {
								claims = append(claims, c.claim(tm.Template))
							}
						}
					}
					res, err := c.allocate(claims...)
					require.NoError(t, err)
					require.Len(t, res, len(claims), "the whole node in one pod")
					if pod.Paired {
						for _, r := range res {
							checkPairing(t, c, "part", r)
						}
					}
				}
			})
		}
	}
}

func modeName(m resources.GroupMode) string {
	if m == resources.GroupsNone {
		return "singles"
	}
	return string(m)
}

// checkPairing asserts that the EFAs of an allocation belong to its
// accelerators: the same pcieRoot as each GPU, the device group of the
// Neuron devices and exactly their EFAs.
func checkPairing(t *testing.T, c *cluster, what string, r resourceapi.AllocationResult) {
	t.Helper()
	reqs := byRequest(r)
	var efas []resourceapi.DeviceRequestAllocationResult
	for name, rs := range reqs {
		if strings.HasPrefix(name, "efa") {
			efas = append(efas, rs...)
		}
	}
	for _, g := range append(reqs["gpu"], reqs["gpus"]...) {
		for _, e := range efas {
			assert.Equal(t, c.attr(g, resources.AttrPCIeRoot), c.attr(e, resources.AttrPCIeRoot), "%s: %s and %s", what, g.Device, e.Device)
		}
	}
	if ns := reqs["neurons"]; len(ns) > 0 && len(ns) <= 4 {
		var want, got []string
		for _, n := range ns {
			want = append(want, c.attr(n, resources.AttrGroup1))
		}
		for _, e := range efas {
			if !strings.HasPrefix(e.Device, "efa-group-") {
				got = append(got, c.attr(e, resources.AttrPCIBusID))
				continue
			}
			// A group stands for every EFA of its root.
			for _, d := range c.topo.Of(topology.KindEFA) {
				if d.PCI.Root == c.attr(e, resources.AttrPCIeRoot) {
					got = append(got, d.PCI.Address.String())
				}
			}
		}
		sort.Strings(want)
		want = slicesCompact(want)
		sort.Strings(got)
		assert.Equal(t, want, got, "%s: the EFAs of these Neuron devices", what)
	}
}

func slicesCompact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func singleClaim(class string) *resourceapi.ResourceClaimTemplate {
	tm := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one"}}
	tm.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
	return tm
}

// TestMixedNeverBoth: in mixed mode a group and one of its members are
// never both allocated, whichever comes first; single-EFA classes (ours
// and AWS's) never select a group.
func TestMixedNeverBoth(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"p5.48xlarge", "p4d.24xlarge", "trn2.48xlarge"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := "../../../testdata/sysfs/" + name + ".sysfs"
			// Group first, then singles until none is left.
			c := newCluster(t, path, resources.GroupsMixed)
			groupTm := singleClaim(resources.DefaultGroupDeviceClass)
			res, err := c.allocate(c.claim(groupTm))
			require.NoError(t, err)
			require.Len(t, res, 1)
			group := res[0].Devices.Results[0]
			require.True(t, strings.HasPrefix(group.Device, "efa-group-"))
			root := c.attr(group, resources.AttrPCIeRoot)
			nEFA := len(c.topo.Of(topology.KindEFA))
			members := 0
			for _, d := range c.topo.Of(topology.KindEFA) {
				if d.PCI.Root == root {
					members++
				}
			}
			got := 0
			for {
				res, err := c.allocate(c.claim(singleClaim(awsEFAClass.Name)))
				require.NoError(t, err)
				if len(res) == 0 {
					break
				}
				d := res[0].Devices.Results[0]
				assert.True(t, strings.HasPrefix(d.Device, "efa-0"), "AWS's class selected %s", d.Device)
				assert.NotEqual(t, root, c.attr(d, resources.AttrPCIeRoot), "member %s of the taken group %s", d.Device, group.Device)
				got++
			}
			assert.Equal(t, nEFA-members, got, "every EFA outside the group, none inside")

			// A single first: its root's group is not available.
			c = newCluster(t, path, resources.GroupsMixed)
			res, err = c.allocate(c.claim(singleClaim(resources.DefaultDeviceClass)))
			require.NoError(t, err)
			single := res[0].Devices.Results[0]
			taken := c.attr(single, resources.AttrPCIeRoot)
			for {
				res, err := c.allocate(c.claim(groupTm))
				require.NoError(t, err)
				if len(res) == 0 {
					break
				}
				assert.NotEqual(t, taken, c.attr(res[0].Devices.Results[0], resources.AttrPCIeRoot), "group of a root whose member %s is taken", single.Device)
			}
		})
	}
}

// TestGroupsWithoutGPU: a root with EFAs and no GPU still forms a claimable
// group (trn1: EFAs beside Neuron devices), and exclusive mode publishes no
// single EFA.
func TestGroupsWithoutGPU(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "../../../testdata/sysfs/trn1.32xlarge.sysfs", resources.GroupsExclusive)
	for range 4 {
		res, err := c.allocate(c.claim(singleClaim(resources.DefaultGroupDeviceClass)))
		require.NoError(t, err)
		require.Len(t, res, 1)
	}
	res, err := c.allocate(c.claim(singleClaim(resources.DefaultGroupDeviceClass)))
	require.NoError(t, err)
	assert.Empty(t, res, "four roots, four groups")
	c = newCluster(t, "../../../testdata/sysfs/trn1.32xlarge.sysfs", resources.GroupsExclusive)
	res, err = c.allocate(c.claim(singleClaim(awsEFAClass.Name)))
	require.NoError(t, err)
	assert.Empty(t, res, "exclusive mode: no single EFA to select")
}
