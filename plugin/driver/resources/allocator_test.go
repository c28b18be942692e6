package resources_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// node is the node the tests publish for.
const node = "node-1"

// awsEFAClass is AWS's EFA DeviceClass, written out as AWS ships it, so a
// change to ours that stops matching it fails here.
var awsEFAClass = &resourceapi.DeviceClass{
	ObjectMeta: metav1.ObjectMeta{Name: "efa.networking.k8s.aws"},
	Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "dra.net" && device.attributes["dra.net"].pciDevice == "Elastic Fabric Adapter (EFA)"`,
	}}}},
}

// The other drivers' classes, as NVIDIA's and the Neuron driver ship them.
var otherClasses = []*resourceapi.DeviceClass{
	{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`}}}}},
	{ObjectMeta: metav1.ObjectMeta{Name: "neuron.aws.com"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "neuron.aws.com"`}}}}},
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, v := range c {
		out = append(out, v)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if v, ok := c[name]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("device class %s not found", name)
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

// otherDriverSlices are slices shaped like NVIDIA's GPU driver's (type,
// pcieRoot and pciBusID per GPU) and the Neuron driver's (device groups per
// Neuron device), for the same machine.
func otherDriverSlices(t *topology.Topology) []*resourceapi.ResourceSlice {
	var gpus, neurons []resourceapi.Device
	for _, d := range t.Accelerators() {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		if s, ok := t.StandardAttributes(d); ok {
			attrs[resources.AttrPCIeRoot] = str(s.PCIeRoot)
			attrs[resources.AttrPCIBusID] = str(s.PCIBusID)
		}
		if d.Kind == topology.KindGPU {
			attrs["type"] = str("gpu")
			gpus = append(gpus, resourceapi.Device{Name: strings.ToLower(d.Name), Attributes: attrs})
			continue
		}
		if g := d.Groups; g != nil {
			attrs[resources.AttrGroup1] = str(g.Group1)
			attrs[resources.AttrGroup4] = str(g.Group4)
			attrs[resources.AttrGroup8] = str(g.Group8)
			attrs[resources.AttrGroup16] = str(g.Group16)
		}
		neurons = append(neurons, resourceapi.Device{Name: fmt.Sprintf("neuron-%d", d.NeuronIndex), Attributes: attrs})
	}
	n := node
	mk := func(drv string, devs []resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: drv + "-" + n}, Spec: resourceapi.ResourceSliceSpec{
			Driver: drv, NodeName: &n, Pool: resourceapi.ResourcePool{Name: n, Generation: 1, ResourceSliceCount: 1}, Devices: devs}}
	}
	return []*resourceapi.ResourceSlice{mk("gpu.nvidia.com", gpus), mk("neuron.aws.com", neurons)}
}

// claimPaths are the users' claims, as they apply them: testdata/claims.
func claimPaths(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("../../../testdata/claims/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no claims in testdata/claims")
	return paths
}

// loadClaims reads the users' claims: each ResourceClaimTemplate becomes the
// claim a pod gets from it, each ResourceClaim is taken as it is.
func loadClaims(t *testing.T) map[string]*resourceapi.ResourceClaim {
	t.Helper()
	paths := claimPaths(t)
	out := map[string]*resourceapi.ResourceClaim{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
				continue
			}
			var meta metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
			claim := &resourceapi.ResourceClaim{}
			switch meta.Kind {
			case "ResourceClaimTemplate":
				var tmpl resourceapi.ResourceClaimTemplate
				require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &tmpl), p)
				claim.Name = tmpl.Name
				claim.Spec = tmpl.Spec.Spec
			case "ResourceClaim":
				require.NoError(t, yaml.UnmarshalStrict([]byte(doc), claim), p)
			default:
				continue
			}
			claim.Namespace = "default"
			claim.UID = types.UID("uid-" + claim.Name)
			applyDefaults(claim)
			out[claim.Name] = claim
		}
	}
	return out
}

// applyDefaults does what the API server's defaulting does to a claim it
// stores: allocationMode ExactCount, count 1.
func applyDefaults(c *resourceapi.ResourceClaim) {
	for i := range c.Spec.Devices.Requests {
		r := c.Spec.Devices.Requests[i].Exactly
		if r == nil {
			continue
		}
		if r.AllocationMode == "" {
			r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
		}
		if r.AllocationMode == resourceapi.DeviceAllocationModeExactCount && r.Count == 0 {
			r.Count = 1
		}
	}
}

// outcome is one claim allocated on one machine.
type outcome struct {
	result  *resourceapi.AllocationResult // nil: cannot be satisfied
	err     error
	byReq   map[string][]resourceapi.DeviceRequestAllocationResult
	devices map[string]resourceapi.Device // allocated device -> its published form
}

func allocate(t *testing.T, fixture string, efaClass *resourceapi.DeviceClass, claim *resourceapi.ResourceClaim) outcome {
	t.Helper()
	root, err := sysfs.Open(fixture)
	require.NoError(t, err)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	cfg := resources.Config{NodeName: node}
	res, err := resources.Build(topo, cfg)
	require.NoError(t, err)
	slices := resources.Slices(res, cfg)
	for i, s := range slices {
		s.Name = fmt.Sprintf("%sslice%d", s.GenerateName, i)
	}
	slices = append(slices, otherDriverSlices(topo)...)
	published := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			published[s.Spec.Driver+"/"+d.Name] = d
		}
	}
	cls := classes{efaClass.Name: efaClass}
	for _, c := range otherClasses {
		cls[c.Name] = c
	}
	ctx := context.Background()
	alloc, err := structured.NewAllocator(ctx, allocfeatures.Scheduler137(), structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, cls, slices, allocfeatures.Cache())
	require.NoError(t, err)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	results, err := alloc.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim.DeepCopy()})
	o := outcome{err: err, byReq: map[string][]resourceapi.DeviceRequestAllocationResult{}, devices: map[string]resourceapi.Device{}}
	if err != nil || len(results) == 0 {
		return o
	}
	o.result = &results[0]
	for _, r := range o.result.Devices.Results {
		o.byReq[r.Request] = append(o.byReq[r.Request], r)
		o.devices[r.Driver+"/"+r.Device] = published[r.Driver+"/"+r.Device]
	}
	return o
}

func (o outcome) attr(r resourceapi.DeviceRequestAllocationResult, name resourceapi.QualifiedName) string {
	d := o.devices[r.Driver+"/"+r.Device]
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// TestClaimsWithRealAllocator runs every claim users write against every
// fixture's slices through the scheduler's own allocator, with our
// DeviceClass and with AWS's.
func TestClaimsWithRealAllocator(t *testing.T) {
	t.Parallel()
	claims := loadClaims(t)
	require.Contains(t, claims, "aligned-efa-nvidia")
	ours := resources.DeviceClasses(resources.ClassOptions{})[0]
	for name, path := range testfixture.Captures(t, "../../..") {
		root, err := sysfs.Open(path)
		require.NoError(t, err)
		topo, err := topology.Scan(root)
		require.NoError(t, err)
		nEFA, nGPU, nNeuron := len(topo.Of(topology.KindEFA)), len(topo.Of(topology.KindGPU)), len(topo.Of(topology.KindNeuron))
		for className, class := range map[string]*resourceapi.DeviceClass{"ours": ours, "aws": awsEFAClass} {
			t.Run(name+"/"+className, func(t *testing.T) {
				t.Parallel()
				// One EFA: wherever there is one.
				o := allocate(t, path, class, claims["single-efa-claim"])
				require.NoError(t, o.err)
				if nEFA == 0 {
					assert.Nil(t, o.result, "no EFA, no allocation")
				} else {
					require.NotNil(t, o.result)
					assert.Len(t, o.byReq["efa"], 1)
				}

				// One EFA and one GPU on the same PCIe root.
				o = allocate(t, path, class, claims["aligned-efa-nvidia"])
				require.NoError(t, o.err)
				if nGPU == 0 || nEFA == 0 {
					assert.Nil(t, o.result, "needs a GPU and an EFA")
				} else {
					require.NotNil(t, o.result)
					e, g := o.byReq["1-efa"][0], o.byReq["1-gpu"][0]
					assert.Equal(t, o.attr(g, resources.AttrPCIeRoot), o.attr(e, resources.AttrPCIeRoot))
					assert.NotEmpty(t, o.attr(e, resources.AttrPCIeRoot))
				}

				// Four EFAs in one claim that several pods share.
				o = allocate(t, path, class, claims["shared-efa"])
				require.NoError(t, o.err)
				if nEFA >= 4 {
					require.NotNil(t, o.result)
					assert.Len(t, o.byReq["efa"], 4)
				} else {
					assert.Nil(t, o.result)
				}

				// Four Neuron devices and four EFAs of one device group.
				o = allocate(t, path, class, claims["aligned-efa-neuron"])
				require.NoError(t, o.err)
				switch name {
				case "trn2.48xlarge", "trn1n.32xlarge":
					require.NotNil(t, o.result)
					require.Len(t, o.byReq["4-efas"], 4)
					require.Len(t, o.byReq["4-neurons"], 4)
					// The four EFAs are those of the four Neuron devices.
					var efas, attached []string
					for _, e := range o.byReq["4-efas"] {
						efas = append(efas, o.attr(e, resources.AttrPCIBusID))
					}
					for _, n := range o.byReq["4-neurons"] {
						attached = append(attached, o.attr(n, resources.AttrGroup1))
					}
					sort.Strings(efas)
					sort.Strings(attached)
					assert.Equal(t, attached, efas)
				case "trn1.32xlarge":
					// trn1 has 8 EFAs for 16 Neuron devices: a group of four
					// Neuron devices holds two EFAs, so no four EFAs share a
					// devicegroup4_id. The claim cannot be satisfied there,
					// by this driver or AWS's (same values).
					assert.Nil(t, o.result)
				default:
					assert.Zero(t, nNeuron)
					assert.Nil(t, o.result, "no Neuron devices")
				}

				// All EFAs plus one GPU on one root: see
				// TestAllEFAsOneGPU for what the allocator says.
			})
		}
	}
}

// TestAllEFAsOneGPU records what the allocator does with
// aligned-all-efa-one-nvidia (allocationMode: All EFAs, one GPU, one
// pcieRoot): it fits only where every EFA of the node sits on one GPU's
// root, that is a single-EFA host.
func TestAllEFAsOneGPU(t *testing.T) {
	t.Parallel()
	claim := loadClaims(t)["aligned-all-efa-one-nvidia"]
	require.NotNil(t, claim)
	for name, path := range testfixture.Captures(t, "../../..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := allocate(t, path, awsEFAClass, claim)
			switch name {
			case "g5.8xlarge":
				require.NoError(t, o.err)
				require.NotNil(t, o.result, "one EFA and one GPU on one root")
				assert.Len(t, o.byReq["all-efas"], 1)
			case "p5.48xlarge", "p5e.48xlarge":
				// 32 EFAs plus a GPU is 33 devices, over a claim's 32.
				require.Error(t, o.err)
				assert.Contains(t, o.err.Error(), "exceeds the claim limit of 32")
				t.Logf("allocator: %v", o.err)
			case "m5.xlarge":
				t.Logf("allocator: %v, result %v", o.err, o.result)
				assert.Nil(t, o.result)
			default:
				// EFAs on several roots: All takes every EFA, and they
				// cannot share one pcieRoot with a GPU (or there is no
				// GPU). The allocator reports it as an error of the
				// claim, not as "does not fit this node".
				require.Error(t, o.err)
				assert.Contains(t, o.err.Error(), "a claim constraint would not be satisfied")
				assert.Nil(t, o.result)
			}
		})
	}
}
