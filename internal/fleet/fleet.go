// Package fleet is the table of EC2 instance types that have EFA: per
// instance family, the sizes that can attach an EFA, the CPU architecture
// and the kind of machine. The chart's default node selection
// (deployments/helm/efakit/values.yaml, nodeSelection.instanceTypes) and
// docs/instance-types.md are generated from it by
// `go run ./internal/fleet/gen`, and a test fails when they differ.
//
// Source: AWS's chart for its EFA device plugin, aws/eks-charts
// stable/aws-efa-k8s-device-plugin/values.yaml at commit bfe91c4 (July
// 2026), which AWS's hack/update-efa-instance-types.sh writes from EC2's
// DescribeInstanceTypes with the filter network-info.efa-supported=true in
// every region, plus a few preview types it lists by hand (SourcePreview),
// and the types the EC2 User Guide lists that the chart did not yet
// (SourceUserGuide).
// EC2's own list is the user guide's "Supported instance types"
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types).
// The architecture is arm64 for Graviton families (a "g" after the
// generation: c7gn, hpc7g, im4gn) and for the Grace-based p6e-gb200 and
// p6e-gb300, amd64 otherwise.
//
// The package is internal: the table goes stale as EC2 adds instance types,
// and on a node the answer is in sysfs (an EFA is there or not), so
// library users should not take it as the truth.
package fleet

import (
	"slices"
	"strings"
)

// Kind is what an instance family is for, as docs/instance-types.md groups them.
type Kind string

// The kinds of EFA instance families.
const (
	GPU    Kind = "GPU"
	Neuron Kind = "Trainium/Inferentia"
	// OtherAccelerator: Qualcomm AI 100 (dl2q), FPGA (f2), Xilinx media
	// accelerators (vt1).
	OtherAccelerator Kind = "other accelerator"
	HPC              Kind = "HPC"
	// General: general-purpose, compute-, memory- and storage-optimised
	// and network-optimised (the "n" families) instances.
	General Kind = "network/compute"
)

// Kinds in the order docs/instance-types.md lists them.
func Kinds() []Kind { return []Kind{GPU, Neuron, OtherAccelerator, HPC, General} }

// Arch is a CPU architecture, as the kubernetes.io/arch label spells it.
type Arch string

// The architectures of EFA instance types.
const (
	AMD64 Arch = "amd64"
	ARM64 Arch = "arm64"
)

// Source says where a family's row comes from.
type Source string

// The sources of the table (see the package doc).
const (
	// SourceDescribe: in AWS's chart from EC2's DescribeInstanceTypes.
	SourceDescribe Source = "aws/eks-charts@bfe91c4 (DescribeInstanceTypes)"
	// SourcePreview: in AWS's chart from the types its script lists by
	// hand, since DescribeInstanceTypes may not return them.
	SourcePreview Source = "aws/eks-charts@bfe91c4 (preview types listed by hand)"
	// SourceUserGuide: not in AWS's chart at that commit; in the EC2 User
	// Guide's table of EFA instance types (efa.html#efa-instance-types,
	// under Nitro v6), and for r9g and r9gd in Karpenter v1.15.2's
	// real-node tables (docs/karpenter-agreement.md).
	SourceUserGuide Source = "EC2 User Guide, EFA supported instance types"
)

// Family is one EC2 instance family with EFA.
type Family struct {
	Name  string // "p5", "p6-b200", "u7i-12tb": the instance type before the "."
	Kind  Kind
	Arch  Arch
	Src   Source
	Sizes []string // the sizes with EFA, smallest first, metal last: "4xlarge", "48xlarge"
}

// InstanceTypes are the family's instance types with EFA: "p5.4xlarge".
func (f Family) InstanceTypes() []string {
	out := make([]string, len(f.Sizes))
	for i, s := range f.Sizes {
		out[i] = f.Name + "." + s
	}
	return out
}

// Families is the table, sorted by name; each call returns a new copy.
func Families() []Family {
	const describe, preview, guide = SourceDescribe, SourcePreview, SourceUserGuide
	return []Family{
		{"c5n", General, AMD64, describe, []string{"9xlarge", "18xlarge", "metal"}},
		{"c6a", General, AMD64, describe, []string{"48xlarge", "metal"}},
		{"c6gn", General, ARM64, describe, []string{"16xlarge"}},
		{"c6i", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"c6id", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"c6in", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"c7a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"c7g", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"c7gd", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"c7gn", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"c7i", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"c8a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"c8g", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"c8gb", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"c8gd", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"c8gn", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"c8i", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"c8ib", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"c8id", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"c8in", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"c9g", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"c9gd", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"dl2q", OtherAccelerator, AMD64, describe, []string{"24xlarge"}},
		{"f2", OtherAccelerator, AMD64, describe, []string{"48xlarge"}},
		{"g4dn", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "16xlarge", "metal"}},
		{"g5", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"}},
		{"g6", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"}},
		{"g6e", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"}},
		{"g7", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "24xlarge", "48xlarge"}},
		{"g7e", GPU, AMD64, describe, []string{"8xlarge", "12xlarge", "24xlarge", "48xlarge"}},
		{"gr6", GPU, AMD64, describe, []string{"8xlarge"}},
		{"hpc6a", HPC, AMD64, describe, []string{"48xlarge"}},
		{"hpc6id", HPC, AMD64, describe, []string{"32xlarge"}},
		{"hpc7a", HPC, AMD64, describe, []string{"12xlarge", "24xlarge", "48xlarge", "96xlarge"}},
		{"hpc7g", HPC, ARM64, describe, []string{"4xlarge", "8xlarge", "16xlarge"}},
		{"hpc8a", HPC, AMD64, describe, []string{"96xlarge"}},
		{"i3en", General, AMD64, describe, []string{"12xlarge", "24xlarge", "metal"}},
		{"i4g", General, ARM64, describe, []string{"16xlarge"}},
		{"i4i", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"i7i", General, AMD64, describe, []string{"24xlarge", "48xlarge", "metal-48xl"}},
		{"i7ie", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"i8g", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"i8ge", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"im4gn", General, ARM64, describe, []string{"16xlarge"}},
		{"inf1", Neuron, AMD64, describe, []string{"24xlarge"}},
		{"m5dn", General, AMD64, describe, []string{"24xlarge", "metal"}},
		{"m5n", General, AMD64, describe, []string{"24xlarge", "metal"}},
		{"m5zn", General, AMD64, describe, []string{"12xlarge", "metal"}},
		{"m6a", General, AMD64, describe, []string{"48xlarge", "metal"}},
		{"m6i", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"m6id", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"m6idn", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"m6in", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"m7a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"m7g", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"m7gd", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"m7i", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"m8a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"m8azn", General, AMD64, describe, []string{"24xlarge", "metal-24xl"}},
		{"m8g", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"m8gb", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"m8gd", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"m8gn", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"m8i", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m8ib", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m8id", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m8idb", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m8idn", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m8in", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"m9g", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"m9gd", General, ARM64, describe, []string{"48xlarge", "metal-48xl"}},
		{"p3dn", GPU, AMD64, describe, []string{"24xlarge"}},
		{"p4d", GPU, AMD64, describe, []string{"24xlarge"}},
		{"p4de", GPU, AMD64, describe, []string{"24xlarge"}},
		{"p5", GPU, AMD64, describe, []string{"4xlarge", "48xlarge"}},
		{"p5e", GPU, AMD64, describe, []string{"48xlarge"}},
		{"p5en", GPU, AMD64, describe, []string{"48xlarge"}},
		{"p6-b200", GPU, AMD64, describe, []string{"48xlarge"}},
		{"p6-b300", GPU, AMD64, describe, []string{"48xlarge"}},
		{"p6e-gb200", GPU, ARM64, preview, []string{"36xlarge"}},
		{"p6e-gb300", GPU, ARM64, preview, []string{"36xlarge"}},
		{"r5dn", General, AMD64, describe, []string{"24xlarge", "metal"}},
		{"r5n", General, AMD64, describe, []string{"24xlarge", "metal"}},
		{"r6a", General, AMD64, describe, []string{"48xlarge", "metal"}},
		{"r6i", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"r6id", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"r6idn", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"r6in", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"r7a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"r7g", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"r7gd", General, ARM64, describe, []string{"16xlarge", "metal"}},
		{"r7i", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"r7iz", General, AMD64, describe, []string{"32xlarge", "metal-32xl"}},
		{"r8a", General, AMD64, describe, []string{"48xlarge", "metal-48xl"}},
		{"r8g", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"r8gb", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"r8gd", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"r8gn", General, ARM64, describe, []string{"16xlarge", "24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"r8i", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r8ib", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r8id", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r8idb", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r8idn", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r8in", General, AMD64, describe, []string{"48xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
		{"r9g", General, ARM64, guide, []string{"48xlarge", "metal-48xl"}},
		{"r9gd", General, ARM64, guide, []string{"48xlarge", "metal-48xl"}},
		{"trn1", Neuron, AMD64, describe, []string{"32xlarge"}},
		{"trn1n", Neuron, AMD64, describe, []string{"32xlarge"}},
		{"trn2", Neuron, AMD64, describe, []string{"3xlarge", "48xlarge"}},
		{"trn2-ac", Neuron, AMD64, preview, []string{"24xlarge"}},
		{"trn2u", Neuron, AMD64, preview, []string{"48xlarge"}},
		{"trn2u-ac", Neuron, AMD64, preview, []string{"24xlarge"}},
		{"u7i-12tb", General, AMD64, describe, []string{"224xlarge"}},
		{"u7i-6tb", General, AMD64, describe, []string{"112xlarge"}},
		{"u7i-8tb", General, AMD64, describe, []string{"112xlarge"}},
		{"u7in-16tb", General, AMD64, describe, []string{"224xlarge"}},
		{"u7in-24tb", General, AMD64, describe, []string{"224xlarge"}},
		{"u7in-32tb", General, AMD64, describe, []string{"224xlarge"}},
		{"u7inh-32tb", General, AMD64, guide, []string{"480xlarge"}},
		{"vt1", OtherAccelerator, AMD64, describe, []string{"24xlarge"}},
		{"x2idn", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"x2iedn", General, AMD64, describe, []string{"32xlarge", "metal"}},
		{"x2iezn", General, AMD64, describe, []string{"12xlarge", "metal"}},
		{"x8aedz", General, AMD64, describe, []string{"24xlarge", "metal-24xl"}},
		{"x8g", General, ARM64, describe, []string{"24xlarge", "48xlarge", "metal-24xl", "metal-48xl"}},
		{"x8i", General, AMD64, describe, []string{"48xlarge", "64xlarge", "96xlarge", "metal-48xl", "metal-96xl"}},
	}
}

// InstanceTypes is every instance type of the table, sorted.
func InstanceTypes() []string {
	var out []string
	for _, f := range Families() {
		out = append(out, f.InstanceTypes()...)
	}
	slices.Sort(out)
	return out
}

// Lookup finds the family of an instance type ("p5.48xlarge") and says
// whether that size has EFA.
func Lookup(instanceType string) (f Family, ok bool) {
	name, size, found := strings.Cut(instanceType, ".")
	if !found {
		return Family{}, false
	}
	for _, f := range Families() {
		if f.Name == name {
			return f, slices.Contains(f.Sizes, size)
		}
	}
	return Family{}, false
}
