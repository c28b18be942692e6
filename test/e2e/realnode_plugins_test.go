package e2e

import (
	"os"

	"github.com/stretchr/testify/require"
)

// rewriteAccelSpecs writes the stand-ins' CDI specs again (after the test
// wiped the directory: they are not efakit's to heal).
func (n *realNode) rewriteAccelSpecs() {
	for _, a := range n.Accel {
		require.NoError(n.T, os.WriteFile(a.File, a.Spec, 0o644))
	}
}
