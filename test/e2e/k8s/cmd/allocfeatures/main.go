// Command allocfeatures prints, as JSON, what kube-scheduler asks of the
// structured allocator and of the CEL compiler with its default feature
// gates, at the Kubernetes this module pins: its own code
// (dynamicresources.AllocatorFeatures) says it. test/e2e's
// TestAllocatorFeaturesMatchScheduler compares it with what efakit's tests
// and benchmarks build the allocator with (internal/allocfeatures).
package main

import (
	"encoding/json"
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	_ "k8s.io/kubernetes/pkg/features" // registers the gates with their defaults
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

func main() {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	out := map[string]any{
		"allocator": dynamicresources.AllocatorFeatures(fts),
		"cel":       cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity, EnableListTypeAttributes: fts.EnableDRAListTypeAttributes},
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
