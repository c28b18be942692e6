package e2e

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/test/e2e/harness"
)

// TestBinaries builds the Kubernetes commands, the node's runtime and the
// plugin that the other tests run (make e2e-build runs it alone: make test builds
// them beside the unit tests, and the tests then find them built).
func TestBinaries(t *testing.T) {
	require.NoError(t, harness.BuildBinaries())
}

func TestMain(m *testing.M) {
	code := m.Run()
	harness.StopShared()
	if cp134 != nil {
		cp134.Stop()
	}
	os.Exit(code)
}
