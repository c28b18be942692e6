package e2e

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/test/e2e/harness"
)

// TestAllocatorFeaturesMatchScheduler: efakit's tests and benchmarks that
// build the structured allocator (driver/resources' allocator, template
// and sharing tests, BenchmarkSchedulingCost) ask it for the features
// kube-scheduler asks with its default gates, so that they run the
// implementation the scheduler runs: what kube-scheduler's own code answers
// (test/e2e/k8s/cmd/allocfeatures, built with the version stamp the e2e's
// kube-scheduler has, since the gates' defaults depend on the version).
func TestAllocatorFeaturesMatchScheduler(t *testing.T) {
	t.Parallel()
	version, err := harness.ModuleKubeVersion("k8s")
	require.NoError(t, err)
	cmd := exec.Command("go", "run", "-ldflags", "-X k8s.io/component-base/version.gitVersion="+version, "./cmd/allocfeatures")
	cmd.Dir = "k8s"
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var got struct {
		Allocator structured.Features `json:"allocator"`
		CEL       cel.Features        `json:"cel"`
	}
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, got.Allocator, allocfeatures.Scheduler137(), "kube-scheduler %s asks the allocator for these features", version)
	assert.Equal(t, got.CEL, allocfeatures.CEL137(), "kube-scheduler %s compiles CEL selectors with these features", version)
}
