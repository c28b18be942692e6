package cluster

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/test/e2e/harness"
)

// The efakit command, built once for the test binary as the image builds
// it (static, -trimpath, -s -w), and the small command that starts it and
// prints its peak RSS (a child's maxrss starts from the peak of the
// process that started it, and this test's is large).
var (
	cliOnce           sync.Once
	cliBin, maxrssBin string
	cliErr            error
)

func efakitCLI(t *testing.T) (string, string) {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "efakit-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliBin, maxrssBin = filepath.Join(dir, "efakit"), filepath.Join(dir, "maxrss")
		for out, pkg := range map[string]string{cliBin: "./cmd/efakit", maxrssBin: "./cmd/efakit/testdata/maxrss"} {
			b := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
			b.Dir = filepath.Join(harness.Root, "plugin")
			b.Env = append(os.Environ(), "CGO_ENABLED=0")
			if o, err := b.CombinedOutput(); err != nil {
				cliErr = errors.New("go build " + pkg + ": " + err.Error() + "\n" + string(o))
				return
			}
		}
	})
	require.NoError(t, cliErr)
	return cliBin, maxrssBin
}

// explainPending runs efakit explain on a pod the shape left pending, as
// a user would against the fleet's API server, and returns its wall time
// and peak RSS. It must say that no node can serve the pod (exit 1) and
// why.
func explainPending(t *testing.T, c *harness.ControlPlane, pod string) (float64, int64) {
	t.Helper()
	cli, maxrss := efakitCLI(t)
	cmd := exec.Command(maxrss, cli, "explain", "--pod", pod, "--kubeconfig", filepath.Join(c.Dir, "admin.kubeconfig"))
	var kib, out bytes.Buffer // maxrss prints the peak, the command's output on its stderr
	cmd.Stdout, cmd.Stderr = &kib, &out
	start := time.Now()
	err := cmd.Run()
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
