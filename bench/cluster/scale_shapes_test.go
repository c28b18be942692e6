package cluster

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/internal/pciids"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/test/e2e/harness"
	"github.com/efakit/efakit/topology"
)

// The fleet harness (scale_test.go) publishes, for every Node it makes,
// the slices one way of publishing that node's hardware gives, and asks
// for the claims that way's users write. Each way is a shape:
//
//   - efakit, efakit-mixed: the slices the plugin publishes in the default
//     and the mixed group mode (resources.Published of the node's fixture
//     under the node's name, the function the plugin and `efakit slices`
//     use), with the accelerator drivers' slices beside them, and the
//     claim `efakit claims` prints for one accelerator and its EFAs;
//   - dranet: the same hardware as kubernetes-sigs/dranet publishes it on
//     EKS (its aws-dranet chart): every EFA with dranet's eight attributes
//     (examples/aws_eks_examples/gpu-efa/resourceslice-dranet.yaml) and
//     the device-group attributes on Trainium (pkg/cloudprovider/aws), every
//     ENA with its interface attributes, the chart's class
//     (device-class.yaml) and the same claim, written for those devices;
//   - upstream: kube-scheduler's own DRA benchmark shape, scheduler_perf
//     SteadyStateClusterResourceClaimTemplate/match_empty_500nodes
//     (test/integration/scheduler_perf/dra in Kubernetes 1.37): ten devices
//     of twelve attributes and two capacities on two PCI roots per node,
//     five requests of one device with a matchAttribute on the root;
//   - plain: pods without claims, on nodes without slices: what the
//     scheduler costs without DRA.

// instanceType is one kind of node of the fleet: a fixture and what it
// holds.
type instanceType struct {
	name    string // the fixture's instance type: p5.48xlarge
	fixture string
	topo    *topology.Topology
	pci     *pcie.Tree
	gpus    int
	neurons int
}

// loadInstanceType reads a bundled fixture.
func loadInstanceType(name string) (*instanceType, error) {
	fixture := filepath.Join("..", "..", "testdata", "sysfs", name+".sysfs")
	root, err := sysfs.Open(fixture)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	topo, err := topology.Scan(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	tree, err := pcie.Discover(sysread.New(root))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &instanceType{name: name, fixture: fixture, topo: topo, pci: tree,
		gpus: len(topo.Of(topology.KindGPU)), neurons: len(topo.Of(topology.KindNeuron))}, nil
}

// shape is one way of publishing the fleet's hardware and claiming it.
type shape struct {
	name string
	// classes are the DeviceClasses the shape's claims name.
	classes []*resourceapi.DeviceClass
	// slices are the ResourceSlices of one node of an instance type.
	slices func(node string, it *instanceType) []*resourceapi.ResourceSlice
	// template is the claim a pod on an instance type asks for; nil for
	// none (plain pods).
	template func(it *instanceType) *resourceapi.ResourceClaimTemplate
	// perNode is how many of the template's pods one node holds.
	perNode func(it *instanceType) int
	// single is the claim of a pod that takes one EFA (the "efa-1"
	// template `efakit claims` prints in the default mode), for the pod
	// mix (EFAKIT_SCALE_SINGLES); nil where the shape has no such pods.
	// servesSingle says whether the shape's devices can serve it: a node
	// group in exclusive mode publishes no single EFA.
	single       func(it *instanceType) *resourceapi.ResourceClaimTemplate
	servesSingle bool
	// ownDriver is the driver whose slices are the shape's own (their
	// bytes per node are reported); "" for none.
	ownDriver string
	// uniform: every node is the same, whatever the fleet mix (upstream,
	// plain); pods need no instance-type selector.
	uniform bool
}

func shapeByName(name string) (*shape, error) {
	switch name {
	case "efakit":
		return efakitShape(resources.GroupsNone, false), nil
	case "efakit-full":
		return efakitShape(resources.GroupsNone, true), nil
	case "efakit-mixed":
		return efakitShape(resources.GroupsMixed, false), nil
	case "efakit-exclusive":
		return efakitShape(resources.GroupsExclusive, false), nil
	case "dranet":
		return dranetShape(), nil
	case "upstream":
		return upstreamShape(), nil
	case "plain":
		return &shape{name: "plain", uniform: true, slices: func(string, *instanceType) []*resourceapi.ResourceSlice { return nil },
			template: func(*instanceType) *resourceapi.ResourceClaimTemplate { return nil }, perNode: func(*instanceType) int { return 110 }}, nil
	}
	return nil, fmt.Errorf("unknown shape %q (efakit, efakit-full, efakit-mixed, efakit-exclusive, dranet, upstream, plain)", name)
}

// accelTemplate picks, of the templates `efakit claims` prints for a
// machine, the one for one accelerator (or the fewest that share EFAs) with
// its EFAs.
func accelTemplate(it *instanceType, mode resources.GroupMode) (*resources.Template, error) {
	tms, _ := resources.ClaimTemplates(it.topo, mode, "")
	for _, want := range []string{"gpu-with-efas", "gpus-with-efa", "neurons-with-efas", "gpus-with-efa-group", "neurons-with-efa-groups"} {
		for i := range tms {
			if tms[i].Template.Name == want {
				return &tms[i], nil
			}
		}
	}
	return nil, fmt.Errorf("%s: no claim for an accelerator with its EFAs", it.name)
}

// efakitShape publishes as the plugin does in a group mode; full adds
// what efakit published before its attributes were cut (every
// resources.MetadataOnly attribute, and virtual: false), to measure what
// the cut saves.
func efakitShape(mode resources.GroupMode, full bool) *shape {
	name := "efakit"
	if mode != resources.GroupsNone {
		name += "-" + string(mode)
	}
	if full {
		name += "-full"
	}
	classes := append(resources.DeviceClasses(resources.ClassOptions{}), harness.AccelClass(resources.GPUDeviceClass), harness.AccelClass(resources.NeuronDeviceClass))
	return &shape{name: name, classes: classes, ownDriver: resources.DefaultDriverName,
		slices: func(node string, it *instanceType) []*resourceapi.ResourceSlice {
			cfg := resources.Config{NodeName: node, Groups: mode}
			pool, err := resources.Published(it.topo, cfg)
			if err != nil {
				panic(fmt.Sprintf("%s: %v", it.name, err)) // the bundled fixtures publish cleanly (TestSlicesAcrossVersions)
			}
			out := resources.Slices(pool, cfg)
			if full {
				for _, sl := range out {
					for i := range sl.Spec.Devices {
						fullAttributes(&sl.Spec.Devices[i], it, cfg)
					}
				}
			}
			return append(out, accelSlices(node, it)...)
		},
		template: func(it *instanceType) *resourceapi.ResourceClaimTemplate {
			tm, err := accelTemplate(it, mode)
			if err != nil {
				panic(err)
			}
			return tm.Template.DeepCopy()
		},
		perNode: func(it *instanceType) int {
			tm, err := accelTemplate(it, mode)
			if err != nil {
				panic(err)
			}
			return tm.PerNode
		},
		single: func(it *instanceType) *resourceapi.ResourceClaimTemplate {
			tms, _ := resources.ClaimTemplates(it.topo, resources.GroupsNone, "")
			for _, tm := range tms {
				if tm.Template.Name == "efa-1" {
					return tm.Template.DeepCopy()
				}
			}
			panic(it.name + ": no efa-1 template")
		},
		servesSingle: mode != resources.GroupsExclusive}
}

// fullAttributes gives a published single EFA its metadata's attributes
// too, and virtual (false), as efakit published them before the cut.
func fullAttributes(d *resourceapi.Device, it *instanceType, cfg resources.Config) {
	for _, e := range it.topo.Of(topology.KindEFA) {
		if resources.DeviceName(e.PCI.Address) != d.Name {
			continue
		}
		attrs, err := resources.EFAMetadata(it.topo, e, cfg)
		if err != nil {
			panic(err)
		}
		no := false
		attrs["virtual"] = resourceapi.DeviceAttribute{BoolValue: &no}
		d.Attributes = attrs
	}
}

// accelSlices are the accelerator drivers' slices of a node: NVIDIA's
// GPUs with the attributes its driver publishes (dranet's
// resourceslice-gpu.yaml is one, from a p4d), or the Neuron driver's
// devices with their device groups.
func accelSlices(node string, it *instanceType) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	if gpus := nvidiaGPUs(node, it); len(gpus) > 0 {
		out = append(out, slice("gpus-"+node, resources.GPUDeviceClass, node, gpus))
	}
	if ns := harness.NeuronDevices(it.topo); len(ns) > 0 {
		out = append(out, slice("neurons-"+node, resources.NeuronDeviceClass, node, ns))
	}
	return out
}

func slice(name, driver, node string, devs []resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: devs}}
}

// nvidiaGPUs are a node's GPUs with the attribute set NVIDIA's DRA driver
// publishes (type, uuid, productName, brand, architecture, addressingMode,
// the CUDA and driver versions, pciBusID, pcieRoot, memory). The versions
// and memory sizes stand in for a real driver's; the UUID is made from the
// node's name, so that no two nodes share one.
func nvidiaGPUs(node string, it *instanceType) []resourceapi.Device {
	var out []resourceapi.Device
	for i, g := range it.topo.Of(topology.KindGPU) {
		s, _ := it.topo.StandardAttributes(g)
		product := pciids.BuiltinDevice(g.PCI.Vendor, g.PCI.Device)
		arch, mem := "Hopper", "80Gi"
		switch {
		case strings.Contains(product, "A100"):
			arch, mem = "Ampere", "40Gi"
		case strings.Contains(product, "H200"):
			mem = "141Gi"
		case strings.Contains(product, "B200"), strings.Contains(product, "B300"), strings.Contains(product, "GB200"):
			arch, mem = "Blackwell", "179Gi"
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", node, i)
		uuid := fmt.Sprintf("GPU-%016x-%04x", h.Sum64(), i)
		out = append(out, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": strAttr("gpu"), "uuid": strAttr(uuid), "productName": strAttr("NVIDIA " + product),
				"brand": strAttr("Nvidia"), "architecture": strAttr(arch), "addressingMode": strAttr("HMM"),
				"cudaComputeCapability": verAttr("9.0.0"), "cudaDriverVersion": verAttr("13.0.0"), "driverVersion": verAttr("580.126.9"),
				resources.AttrPCIBusID: strAttr(s.PCIBusID), resources.AttrPCIeRoot: strAttr(s.PCIeRoot)},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(mem)}}})
	}
	return out
}

func strAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}

func verAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: &s}
}

func intAttr(n int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &n} }

func boolAttr(b bool) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{BoolValue: &b} }

func dranetName(a pcie.Address) string {
	return "pci-" + strings.NewReplacer(":", "-", ".", "-").Replace(a.String())
}

func qn(domain, name string) resourceapi.QualifiedName {
	return resourceapi.QualifiedName(domain + "/" + name)
}

// dranetShape is the fleet as dranet publishes it for EKS.
func dranetShape() *shape {
	const d = "dra.net"
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: resources.DefaultDeviceClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "dra.net" && device.attributes["dra.net"].pciDevice == 'Elastic Fabric Adapter (EFA)'`}}}}}
	return &shape{name: "dranet", ownDriver: d,
		classes: []*resourceapi.DeviceClass{class, harness.AccelClass(resources.GPUDeviceClass), harness.AccelClass(resources.NeuronDeviceClass)},
		slices: func(node string, it *instanceType) []*resourceapi.ResourceSlice {
			var devs []resourceapi.Device
			for _, e := range it.topo.Of(topology.KindEFA) {
				s, _ := it.topo.StandardAttributes(e)
				attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					qn(d, "numaNode"): intAttr(int64(max(e.NUMANode(), 0))), qn(d, "pciAddress"): strAttr(e.PCI.Address.String()),
					qn(d, "pciDevice"): strAttr("Elastic Fabric Adapter (EFA)"), qn(d, "pciVendor"): strAttr("Amazon.com, Inc."),
					qn(d, "pciSubsystem"): strAttr(fmt.Sprintf("%04x", e.PCI.SubsystemDevice)), qn(d, "rdma"): boolAttr(true),
					qn(d, "rdmaDevice"): strAttr(e.Name), resources.AttrPCIeRoot: strAttr(s.PCIeRoot)}
				if g := e.Groups; g != nil {
					attrs[resources.AttrGroup1], attrs[resources.AttrGroup4] = strAttr(g.Group1), strAttr(g.Group4)
					attrs[resources.AttrGroup8], attrs[resources.AttrGroup16] = strAttr(g.Group8), strAttr(g.Group16)
				}
				devs = append(devs, resourceapi.Device{Name: dranetName(e.PCI.Address), Attributes: attrs})
			}
			for i, p := range it.pci.Devices {
				if p.Vendor != 0x1d0f || (p.Device != 0xec20 && p.Device != 0xec21 && p.Device != 0x0ec2 && p.Device != 0x1ec2) {
					continue
				}
				root := p.Root
				devs = append(devs, resourceapi.Device{Name: dranetName(p.Address), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					qn(d, "alias"): strAttr(""), qn(d, "ebpf"): boolAttr(false), qn(d, "encapsulation"): strAttr("ether"),
					qn(d, "ifName"): strAttr(fmt.Sprintf("ens%d", 32+i)), qn(d, "ipv4"): strAttr(fmt.Sprintf("10.%d.%d.%d/19", i%250, len(node)%250, 10+i%200)),
					qn(d, "mac"): strAttr(fmt.Sprintf("0e:96:fe:e8:%02x:%02x", i%256, len(node)%256)), qn(d, "mtu"): intAttr(9001),
					qn(d, "numaNode"): intAttr(int64(max(p.NUMANode, 0))), qn(d, "pciAddress"): strAttr(p.Address.String()),
					qn(d, "pciDevice"): strAttr("Elastic Network Adapter (ENA)"), qn(d, "pciSubsystem"): strAttr(fmt.Sprintf("%04x", p.SubsystemDevice)),
					qn(d, "pciVendor"): strAttr("Amazon.com, Inc."), qn(d, "rdma"): boolAttr(false), qn(d, "sriov"): boolAttr(false),
					qn(d, "state"): strAttr("up"), qn(d, "type"): strAttr("device"), qn(d, "virtual"): boolAttr(false),
					resources.AttrPCIeRoot: strAttr(root)}})
			}
			return append([]*resourceapi.ResourceSlice{slice(node+"-dra.net", d, node, devs)}, accelSlices(node, it)...)
		},
		// The claim efakit's users write, for dranet's devices: the same
		// requests, counts and constraint.
		template: func(it *instanceType) *resourceapi.ResourceClaimTemplate {
			tm, err := accelTemplate(it, resources.GroupsNone)
			if err != nil {
				panic(err)
			}
			return tm.Template.DeepCopy()
		},
		perNode: func(it *instanceType) int {
			tm, err := accelTemplate(it, resources.GroupsNone)
			if err != nil {
				panic(err)
			}
			return tm.PerNode
		}}
}

// upstreamShape is scheduler_perf's match_empty shape.
func upstreamShape() *shape {
	const d = "test-driver.cdi.k8s.io"
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "test-class"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "test-driver.cdi.k8s.io"`}}}}}
	return &shape{name: "upstream", ownDriver: d, uniform: true, classes: []*resourceapi.DeviceClass{class},
		slices: func(node string, _ *instanceType) []*resourceapi.ResourceSlice {
			var devs []resourceapi.Device
			for i := range 10 {
				r := strconv.Itoa(i % 2)
				devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("basic-device-%d", i),
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						"driver": strAttr("xe"), "driverVersion": verAttr("1.2.3"), "resource.k8s.io/pciRoot": strAttr(r),
						"family": strAttr("Arc Pro B-Series"), "health": strAttr("Healthy"), "model": strAttr("B60"),
						"pciAddress": strAttr(fmt.Sprintf("0000:0%d:00.0", i)), "pciId": strAttr("0xe211"), "pciRoot": strAttr("0" + r),
						"resource.kubernetes.io/pciBusID": strAttr(fmt.Sprintf("0000:0%d:00.0", i)),
						"resource.kubernetes.io/pciRoot":  strAttr("pci0000:0" + r), "sriov": boolAttr(true), "type": strAttr("gpu")},
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
						"memory": {Value: resource.MustParse("24480Mi")}, "millicores": {Value: resource.MustParse("1k")}}})
			}
			return []*resourceapi.ResourceSlice{slice("resourceslice-"+node, d, node, devs)}
		},
		template: func(*instanceType) *resourceapi.ResourceClaimTemplate {
			var reqs []resourceapi.DeviceRequest
			var names []string
			for i := range 5 {
				n := fmt.Sprintf("req-%d", i)
				names = append(names, n)
				reqs = append(reqs, resourceapi.DeviceRequest{Name: n, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "test-class",
					AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}})
			}
			root := resourceapi.FullyQualifiedName("resource.kubernetes.io/pciRoot")
			return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "test-claim-template"},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
					Requests: reqs, Constraints: []resourceapi.DeviceConstraint{{Requests: names, MatchAttribute: &root}}}}}}
		},
		perNode: func(*instanceType) int { return 2 }}
}

// fleetMix is how many nodes of each instance type, by weight.
type fleetMix []struct {
	it     *instanceType
	weight int
}

// parseMix reads "p5.48xlarge=4,p5en.48xlarge=3,p6-b200.48xlarge=2,trn2.48xlarge=1"
// (a weight of 1 where none is given).
func parseMix(s string) (fleetMix, error) {
	var out fleetMix
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		weight := 1
		if ok {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("fleet mix %q: weight %q", s, w)
			}
			weight = n
		}
		it, err := loadInstanceType(name)
		if err != nil {
			return nil, err
		}
		out = append(out, struct {
			it     *instanceType
			weight int
		}{it, weight})
	}
	return out, nil
}

// of is the instance type of node i of n: the weights' share of the
// fleet, interleaved (node i's type by i modulo the weights' sum).
func (m fleetMix) of(i int) *instanceType {
	sum := 0
	for _, e := range m {
		sum += e.weight
	}
	k := i % sum
	for _, e := range m {
		if k < e.weight {
			return e.it
		}
		k -= e.weight
	}
	return m[0].it
}

func (m fleetMix) String() string {
	var parts []string
	for _, e := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", e.it.name, e.weight))
	}
	return strings.Join(parts, ",")
}

// sliceBytesOf is the JSON of slices, as a client sends them.
func sliceBytesOf(slices []*resourceapi.ResourceSlice, driver string) int {
	n := 0
	for _, s := range slices {
		if s.Spec.Driver != driver {
			continue
		}
		b, _ := json.Marshal(s)
		n += len(b)
	}
	return n
}

// scaleNode is a Node as a kubelet registers it, with its instance type
// label, ready.
func scaleNode(name string, it *instanceType) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, corev1.LabelInstanceTypeStable: it.name}}}
}
