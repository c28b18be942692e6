package cluster

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/test/e2e/harness"
)

// explainPending runs efakit explain on a pod the shape left pending, as
// a user would against the fleet's API server, and returns its wall time
// and peak RSS. It must say that no node can serve the pod (exit 1) and
// why.
func explainPending(t *testing.T, c *harness.ControlPlane, pod string) (float64, int64) {
	t.Helper()
	cli, err := harness.CLIBinary()
	require.NoError(t, err)
	// maxrss starts efakit and prints its peak RSS: a child's maxrss
	// starts from the peak of the process that started it, and this
	// test's is large.
	maxrss, err := harness.PluginCommand("./cmd/efakit/testdata/maxrss")
	require.NoError(t, err)
	cmd := exec.Command(maxrss, cli, "explain", "--pod", pod, "--kubeconfig", filepath.Join(c.Dir, "admin.kubeconfig"))
	var kib, out bytes.Buffer // maxrss prints the peak, the command's output on its stderr
	cmd.Stdout, cmd.Stderr = &kib, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "efakit explain %s: %s", pod, out.String())
	assert.Equal(t, 1, ee.ExitCode(), "efakit explain %s: no node can serve it\n%s", pod, out.String())
	assert.Contains(t, out.String(), "cannot serve request", "efakit explain %s", pod)
	assert.Contains(t, out.String(), "why: no node the pod may run on can serve its EFA requests.")
	t.Logf("efakit explain %s (%s):\n%s", pod, took.Round(time.Millisecond), out.String())
	peak, err := strconv.ParseInt(strings.TrimSpace(kib.String()), 10, 64)
	require.NoError(t, err, "maxrss printed %q", kib.String())
	return took.Seconds(), peak << 10
}
