package resources

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/topology"
)

// The other drivers' classes that templates pair EFAs with.
const (
	GPUDeviceClass    = "gpu.nvidia.com"
	NeuronDeviceClass = "neuron.aws.com"
)

// Template is a ResourceClaimTemplate efakit suggests for a machine, with
// why it has the counts it has, and how many pods of it fit one node.
type Template struct {
	Template *resourceapi.ResourceClaimTemplate
	Comment  string
	// PerNode is how many claims of the template one node satisfies at
	// once (8 on a p5 for "one GPU with its EFAs").
	PerNode int
}

// AllPod is an example pod that takes every accelerator and EFA of a node.
// Its image is a placeholder: created as it is, the pod would hold every EFA
// of a node while the image fails to pull, so `efakit claims` prints it only
// with --example-pods, marked as an example.
type AllPod struct {
	Pod     *corev1.Pod
	Comment string
	// Paired is true when each of its claims pairs accelerators with
	// their EFAs (one claim per accelerator); false when it takes the
	// node's EFAs in one claim and its accelerators in another.
	Paired bool
}

func request(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
}

func template(name string, reqs []resourceapi.DeviceRequest, qn resourceapi.QualifiedName) *resourceapi.ResourceClaimTemplate {
	t := &resourceapi.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	t.Spec.Spec.Devices.Requests = reqs
	match := resourceapi.FullyQualifiedName(qn)
	if match != "" && len(reqs) > 1 {
		var names []string
		for _, r := range reqs {
			names = append(names, r.Name)
		}
		t.Spec.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: names, MatchAttribute: &match}}
	}
	return t
}

// ClaimTemplates are the claims that fit the machine of t in the given
// group mode: one EFA; one accelerator (or the fewest that share their
// EFAs) with the EFAs that belong to it, by exact count and a shared
// pcieRoot (or Neuron device group); and the whole node, with a pod that
// takes it: in one claim where the node's accelerators and EFAs fit the 32
// devices a claim holds, else its EFAs in one claim and its accelerators in
// another (p5: 32 EFAs and 8 GPUs), so that no container's EFAs are split
// over claims when one claim can hold them. They need nothing beyond the
// stable API.
func ClaimTemplates(t *topology.Topology, mode GroupMode, efaClass string) ([]Template, *AllPod) {
	if efaClass == "" {
		efaClass = DefaultDeviceClass
	}
	var out []Template
	efas := t.Of(topology.KindEFA)
	if len(efas) == 0 {
		return nil, nil
	}
	if mode != GroupsExclusive {
		out = append(out, Template{
			Template: template("efa-1", []resourceapi.DeviceRequest{request("efa", efaClass, 1)}, ""),
			Comment:  "one EFA, anywhere on the node", PerNode: len(efas),
		})
	}
	if mode != GroupsNone {
		out = append(out, Template{
			Template: template("efa-group", []resourceapi.DeviceRequest{request("efas", DefaultGroupDeviceClass, 1)}, ""),
			Comment:  "all EFAs of one PCIe root, as one group device", PerNode: len(Groups(t, efas).List),
		})
	}
	gpus := t.Of(topology.KindGPU)
	roots := rootCounts(t)
	var perAccel *Template
	if len(gpus) > 0 {
		if mode != GroupsExclusive {
			// EFAs a GPU owns: its root's EFAs over its root's GPUs.
			// p5: 4/1; p5en: 4/2; p6-b200: 2/2; p4d: 1/2, so two
			// GPUs share one EFA.
			gpr, epr := roots.minRatio()
			if n := epr / gpr; n >= 1 {
				tm := Template{
					Template: template("gpu-with-efas", []resourceapi.DeviceRequest{request("gpu", GPUDeviceClass, 1), request("efas", efaClass, int64(n))}, AttrPCIeRoot),
					Comment:  fmt.Sprintf("one GPU with the %d EFA(s) that belong to it: %d EFA(s) and %d GPU(s) share each PCIe root", n, epr, gpr),
					PerNode:  len(gpus),
				}
				out = append(out, tm)
				perAccel = &out[len(out)-1]
			} else {
				k := gpr / epr
				out = append(out, Template{
					Template: template("gpus-with-efa", []resourceapi.DeviceRequest{request("gpus", GPUDeviceClass, int64(k)), request("efa", efaClass, 1)}, AttrPCIeRoot),
					Comment:  fmt.Sprintf("%d GPUs with the EFA they share: %d GPUs and %d EFA(s) on each PCIe root", k, gpr, epr),
					PerNode:  len(efas),
				})
				perAccel = &out[len(out)-1]
			}
		}
		if mode != GroupsNone {
			gpr, _ := roots.minRatio()
			out = append(out, Template{
				Template: template("gpus-with-efa-group", []resourceapi.DeviceRequest{request("gpus", GPUDeviceClass, int64(gpr)), request("efas", DefaultGroupDeviceClass, 1)}, AttrPCIeRoot),
				Comment:  fmt.Sprintf("the %d GPU(s) of a PCIe root with all its EFAs as one group device", gpr),
				PerNode:  len(roots.gpus),
			})
			if mode == GroupsExclusive {
				perAccel = &out[len(out)-1]
			}
		}
	}
	neurons := t.Of(topology.KindNeuron)
	if len(neurons) >= 4 && t.Table != nil {
		// The EFAs of a block of four Neuron devices (devicegroup4_id).
		blocks := map[string]map[string]bool{}
		for _, e := range efas {
			if e.Groups != nil {
				if blocks[e.Groups.Group4] == nil {
					blocks[e.Groups.Group4] = map[string]bool{}
				}
				blocks[e.Groups.Group4][e.Name] = true
			}
		}
		m := 0
		for _, b := range blocks {
			if m == 0 || len(b) < m {
				m = len(b)
			}
		}
		if m > 0 && mode != GroupsExclusive {
			out = append(out, Template{
				Template: template("neurons-with-efas", []resourceapi.DeviceRequest{request("neurons", NeuronDeviceClass, 4), request("efas", efaClass, int64(m))}, AttrGroup4),
				Comment:  fmt.Sprintf("four Neuron devices of one device group with its %d EFA(s) (resource.aws.com/devicegroup4_id)", m),
				PerNode:  len(neurons) / 4,
			})
			perAccel = &out[len(out)-1]
		}
		// Groups carry devicegroup4_id where all their EFAs share it (trn2:
		// a switch's two EFAs serve one block of four); on trn1 and trn1n
		// a root's EFAs serve two blocks, so no group pairs by device group.
		if mode != GroupsNone {
			perBlock := map[string]int{}
			for _, g := range Groups(t, efas).List {
				v := g.Members[0].Groups
				same := v != nil
				for _, m := range g.Members {
					same = same && m.Groups != nil && m.Groups.Group4 == v.Group4
				}
				if same {
					perBlock[v.Group4]++
				}
			}
			k := 0
			for _, n := range perBlock {
				if k == 0 || n < k {
					k = n
				}
			}
			if k > 0 && len(perBlock)*4 == len(neurons) {
				out = append(out, Template{
					Template: template("neurons-with-efa-groups", []resourceapi.DeviceRequest{request("neurons", NeuronDeviceClass, 4), request("efas", DefaultGroupDeviceClass, int64(k))}, AttrGroup4),
					Comment:  fmt.Sprintf("four Neuron devices of one device group with the %d group device(s) of its EFAs", k),
					PerNode:  len(neurons) / 4,
				})
				if mode == GroupsExclusive {
					perAccel = &out[len(out)-1]
				}
			}
		}
	}
	if perAccel == nil {
		return out, nil
	}
	nEFA := len(efas)
	efaReq := request("efas", efaClass, int64(len(efas)))
	if mode == GroupsExclusive {
		nEFA = len(Groups(t, efas).List)
		efaReq = request("efas", DefaultGroupDeviceClass, int64(nEFA))
	}
	var accReqs []resourceapi.DeviceRequest
	if len(gpus) > 0 {
		accReqs = append(accReqs, request("gpus", GPUDeviceClass, int64(len(gpus))))
	}
	if len(neurons) > 0 {
		accReqs = append(accReqs, request("neurons", NeuronDeviceClass, int64(len(neurons))))
	}
	nAcc := len(t.Accelerators())
	if nAcc+nEFA <= resourceapi.AllocationResultsMaxSize {
		// One claim holds the whole node.
		whole := Template{Template: template("whole-node", append(accReqs, efaReq), ""), PerNode: 1,
			Comment: fmt.Sprintf("every accelerator and EFA of the node in one claim (%d devices, within the 32 a claim holds)", nAcc+nEFA)}
		out = append(out, whole)
		return out, allPod(&out[len(out)-1], 1, whole.Comment)
	}
	if nEFA <= resourceapi.AllocationResultsMaxSize && nAcc <= resourceapi.AllocationResultsMaxSize {
		// A container's EFAs in one claim, its accelerators in another:
		// every EFA reaches the container through one CDI device, and
		// taking everything needs no pairing.
		efaT := Template{Template: template("whole-node-efas", []resourceapi.DeviceRequest{efaReq}, ""), PerNode: 1,
			Comment: fmt.Sprintf("every EFA of the node in one claim (%d), beside whole-node-accelerators", nEFA)}
		accT := Template{Template: template("whole-node-accelerators", accReqs, ""), PerNode: 1,
			Comment: fmt.Sprintf("every accelerator of the node in one claim (%d), beside whole-node-efas", nAcc)}
		out = append(out, accT, efaT)
		pod := allPod(&out[len(out)-2], 1, "")
		pod.add(&out[len(out)-1])
		pod.Comment = fmt.Sprintf("every accelerator and EFA of the node: %d devices pass the 32 a claim holds, so two claims, the %d accelerators in one and the %d EFAs in the other, both given to one container",
			nAcc+nEFA, nAcc, nEFA)
		return out, pod
	}
	pod := allPod(perAccel, perAccel.PerNode, fmt.Sprintf(
		"every accelerator and EFA of the node: %d devices pass the 32 a claim holds, and so do the EFAs alone, so %d claims of %s in one pod, each paired on its own root or device group",
		nAcc+nEFA, perAccel.PerNode, perAccel.Template.Name))
	pod.Paired = true
	return out, pod
}

// allPod is a pod taking n claims of one template, in one container.
func allPod(tm *Template, n int, comment string) *AllPod {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "whole-node"},
	}
	pod.Spec.Containers = []corev1.Container{{Name: "train", Image: "training-image"}}
	a := &AllPod{Pod: pod, Comment: comment}
	for range n {
		a.add(tm)
	}
	return a
}

// add gives the pod's container one more claim of a template.
func (a *AllPod) add(tm *Template) {
	tn := tm.Template.Name
	name := fmt.Sprintf("part-%d", len(a.Pod.Spec.ResourceClaims))
	a.Pod.Spec.ResourceClaims = append(a.Pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &tn})
	c := &a.Pod.Spec.Containers[0]
	c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: name})
}

// rootStats counts GPUs and EFAs per PCIe root.
type rootStats struct {
	gpus, efas map[string]int
}

func rootCounts(t *topology.Topology) rootStats {
	r := rootStats{gpus: map[string]int{}, efas: map[string]int{}}
	for _, d := range t.Devices {
		if d.PCI == nil {
			continue
		}
		switch d.Kind {
		case topology.KindGPU:
			r.gpus[d.PCI.Root]++
		case topology.KindEFA:
			r.efas[d.PCI.Root]++
		}
	}
	return r
}

// minRatio returns, over the roots holding GPUs and EFAs, the GPUs and EFAs
// of the root with the fewest EFAs per GPU, so the template fits every root.
func (r rootStats) minRatio() (gpus, efas int) {
	var roots []string
	for root := range r.gpus {
		if r.efas[root] > 0 {
			roots = append(roots, root)
		}
	}
	slices.Sort(roots)
	for _, root := range roots {
		g, e := r.gpus[root], r.efas[root]
		if gpus == 0 || e*gpus < efas*g {
			gpus, efas = g, e
		}
	}
	if gpus == 0 {
		return 1, 0
	}
	return gpus, efas
}
