package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/test/e2e/harness"
)

// realNode is the harness's real node (a kubelet, containerd and runc on
// this machine) with the tests' own checks and actions as its methods.
type realNode struct{ *harness.RealNode }

// startRealNode starts a real node (harness.StartRealNode): containerd
// and a kubelet, once the node is Ready.
func startRealNode(t *testing.T, c *harness.ControlPlane) *realNode {
	t.Helper()
	return &realNode{harness.StartRealNode(t, c)}
}

// startRealNodeWith is startRealNode with options.
func startRealNodeWith(t *testing.T, c *harness.ControlPlane, o harness.NodeOptions) *realNode {
	t.Helper()
	return &realNode{harness.StartRealNodeWith(t, c, o)}
}

// reboot simulates a power cut and a boot under a new boot ID: every
// process of the node dies (the plugin, the kubelet, containerd, the shims
// and the containers), what a reboot empties is emptied (/run/containerd,
// a tmpfs, with the containers' mounts; the CDI directory, /var/run/cdi on
// a node), and containerd and the kubelet start again. The caller starts
// the plugins again, as their DaemonSets would.
func (n *realNode) reboot(bootID string) {
	t := n.T
	for _, name := range []string{"efakit-plugin", "kubelet"} {
		n.StopProc(name, syscall.SIGKILL, 10*time.Second)
	}
	n.KillAll(func() []int { return harness.CgroupPIDs("kubepods") })
	n.StopProc("containerd", syscall.SIGKILL, 10*time.Second)
	n.KillAll(n.NamespacePIDs)
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.Holder.Process.Pid), "-m", "--", "sh", "-c",
		"umount -R /run/containerd && mount -t tmpfs -o mode=0755 tmpfs /run/containerd").CombinedOutput()
	require.NoError(t, err, "%s", out)
	entries, err := os.ReadDir(n.CDI)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.RemoveAll(filepath.Join(n.CDI, e.Name())))
	}
	n.SetBootID(bootID)
	n.StartContainerd()
	n.StartKubelet()
}
