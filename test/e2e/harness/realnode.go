package harness

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The real node: a kubelet built from test/e2e/k8s (the control plane's
// version; no kubectl: the tests read pod logs through the API's pods/log
// subresource with client-go, the call kubectl logs makes), containerd, its runc shim and ctr from test/e2e/runtime, Debian's
// runc, the CNI loopback plugin and cmd/podnet, with images made here
// (cmd/pause, Debian's static busybox). containerd and the kubelet run in a
// private mount namespace that holds everything they mount and the three
// sysctls the kubelet insists on (bind-mounted files), so the host's
// sysctls, network and mount table stay as they were; every file is under
// one temporary directory, and stop removes what start made.

const (
	BusyboxImage = "efakit.test/busybox:e2e"
	pauseImage   = "efakit.test/pause:e2e"
)

// hostPaths are the fixed paths containerd and the kubelet write whatever
// their configuration says (containerd's shim sockets in /run/containerd,
// libcni's cache, the kubelet's container log links and its device plugin
// socket in /var/lib/kubelet/device-plugins): each is a tmpfs
// inside the node's mount namespace, over a directory made for it on the
// host where there was none and removed at stop.
var hostPaths = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/lib/kubelet"}

// nodeBins are the real node's programs.
type nodeBins struct {
	kubelet, containerd, shim, Ctr, loopback, podnet, runc, Busybox, pause string
}

var (
	nodeBinOnce sync.Once
	nodeBin     nodeBins
	nodeBinErr  error
)

// realNodeBinaries builds (or finds in the build cache) the node's
// programs, once per test binary. Debian's runc and busybox-static come
// from make e2e-deps.
func realNodeBinaries() (nodeBins, error) {
	nodeBinOnce.Do(func() {
		bins, err := binDir()
		if err != nil {
			nodeBinErr = err
			return
		}
		if err := buildKube(bins, "kubelet"); err != nil {
			nodeBinErr = err
			return
		}
		if err := goBuild("runtime", bins, []string{"containerd", "containerd-shim-runc-v2", "ctr", "loopback"}, []string{"CGO_ENABLED=0"},
			"-tags", "no_btrfs no_devmapper no_zfs", "-ldflags", "-s -w",
			"github.com/containerd/containerd/v2/cmd/containerd", "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
			"github.com/containerd/containerd/v2/cmd/ctr", "github.com/containernetworking/plugins/plugins/main/loopback"); err != nil {
			nodeBinErr = err
			return
		}
		b := exec.Command("go", "build", "-o", bins+"/", "./cmd/podnet", "./cmd/pause")
		b.Dir = e2eDir
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			nodeBinErr = fmt.Errorf("go build podnet, pause: %v\n%s", err, out)
			return
		}
		nodeBin = nodeBins{kubelet: bins + "/kubelet", containerd: bins + "/containerd",
			shim: bins + "/containerd-shim-runc-v2", Ctr: bins + "/ctr", loopback: bins + "/loopback",
			podnet: bins + "/podnet", pause: bins + "/pause"}
		for _, p := range []struct {
			to   *string
			name string
		}{{&nodeBin.runc, "runc"}, {&nodeBin.Busybox, "busybox"}} {
			if *p.to, err = exec.LookPath(p.name); err != nil {
				nodeBinErr = fmt.Errorf("%s is not installed (make e2e-deps: apt-get install runc busybox-static): %w", p.name, err)
				return
			}
		}
	})
	return nodeBin, nodeBinErr
}

// nodeHostName is the name the node registers under, which the API server
// dials (--kubelet-preferred-address-types=Hostname) to reach the kubelet
// for logs: the machine's host name where it resolves to a loopback
// address, as on the CI machine, else localhost.
func nodeHostName() string {
	host, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	addrs, err := net.LookupHost(host)
	if err != nil || len(addrs) == 0 || !net.ParseIP(addrs[0]).IsLoopback() {
		return "localhost"
	}
	return host
}

// RealNode is one kubelet with its container runtime on this machine,
// registered with the shared control plane under nodeHostName.
type RealNode struct {
	T       *testing.T
	CP      *ControlPlane
	Name    string
	Dir     string
	Bins    nodeBins
	Holder  *exec.Cmd // the process that holds the mount namespace
	Procs   map[string]*exec.Cmd
	made    []string // host directories made as mount points
	mounted []string // file systems the node mounted on the host (a small CDI directory)
	Sock    string   // containerd's socket
	Kubelet string   // the kubelet's root directory
	CDI     string   // the CDI directory containerd reads

	PluginHTTP string // efakit-plugin's /metrics, /readyz
	Accel      []*AccelDriver
	// kubeletGates are the kubelet's feature gates other than their
	// defaults (NodeOptions.KubeletGates).
	kubeletGates map[string]bool
}

// NodeOptions change a real node from the default.
type NodeOptions struct {
	// cdiSize, when set, makes the CDI directory a file system of its own
	// of this size (a tmpfs: "1m"), mounted before containerd starts, so
	// that a test can fill it or make it read-only.
	CDISize string
	// kubeletGates set the kubelet's feature gates (featureGates in its
	// configuration), e.g. ResourceHealthStatus: false for a kubelet that
	// never opens the health stream, as 1.34 and 1.35 by default.
	KubeletGates map[string]bool
}

// StartRealNode starts containerd and a kubelet and waits until the node
// is Ready. Only one runs at a time: it takes the host name.
func StartRealNode(t *testing.T, c *ControlPlane) *RealNode {
	t.Helper()
	return StartRealNodeWith(t, c, NodeOptions{})
}

// StartRealNodeWith is StartRealNode with options.
func StartRealNodeWith(t *testing.T, c *ControlPlane, o NodeOptions) *RealNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the real node needs root")
	}
	bins, err := realNodeBinaries()
	require.NoError(t, err)
	host := nodeHostName()
	cleanStaleNodes()
	if _, err := os.Stat("/sys/fs/cgroup/memory/kubepods"); err == nil {
		t.Fatal("a kubelet's cgroups (kubepods) exist on this machine: the real node would share them with that kubelet")
	}
	dir, err := os.MkdirTemp("", "efakit-node-")
	require.NoError(t, err)
	n := &RealNode{T: t, CP: c, Name: strings.ToLower(host), Dir: dir, Bins: bins, Procs: map[string]*exec.Cmd{},
		Sock: filepath.Join(dir, "containerd.sock"), Kubelet: filepath.Join(dir, "kubelet"), CDI: filepath.Join(dir, "cdi"),
		kubeletGates: o.KubeletGates}
	t.Cleanup(n.stop)
	for _, d := range []string{"sysctl", "cni/bin", "cni/conf", "cni/data", "cdi", "kubelet/plugins", "kubelet/plugins_registry", "pod-logs", "containerd", "images"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	for _, f := range []struct{ name, value string }{{"one", "1\n"}, {"ten", "10\n"}} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "sysctl", f.name), []byte(f.value), 0o644))
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			require.NoError(t, os.MkdirAll(p, 0o755))
			n.made = append(n.made, p)
		}
	}
	// For a later run to clean up after this one, should this test
	// binary be killed before its cleanup.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "made"), []byte(strings.Join(n.made, "\n")), 0o644))
	// The namespace: sysctls the kubelet reads and writes, and a tmpfs on
	// each fixed path. unshare without --fork execs sh, and sh execs
	// sleep: one PID throughout.
	script := fmt.Sprintf(`set -e
mount --bind %[1]s/sysctl/one /proc/sys/vm/overcommit_memory
mount --bind %[1]s/sysctl/ten /proc/sys/kernel/panic
mount --bind %[1]s/sysctl/one /proc/sys/kernel/panic_on_oops
for p in %[2]s; do mount -t tmpfs -o mode=0755 tmpfs "$p"; done
exec sleep infinity`, dir, strings.Join(hostPaths, " "))
	if o.CDISize != "" {
		// On the host, before the node's namespace copies the host's
		// mounts: the test reads and changes what the node sees.
		out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+o.CDISize+",mode=0755", "efakit-cdi", n.CDI).CombinedOutput()
		require.NoError(t, err, "%s", out)
		n.mounted = append(n.mounted, n.CDI)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "mounted"), []byte(n.CDI), 0o644))
	}
	n.Holder = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	n.Holder.Stderr = n.logFile("namespace")
	n.Holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, n.Holder.Start())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "holder.pid"), []byte(strconv.Itoa(n.Holder.Process.Pid)), 0o644))
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.Holder.Process.Pid))
		return strings.HasPrefix(string(b), "sleep")
	}, 10*time.Second, 20*time.Millisecond, "the mount namespace holder")

	// CNI: the loopback plugin and podnet, one network.
	for _, p := range []string{bins.loopback, bins.podnet} {
		require.NoError(t, os.Symlink(p, filepath.Join(dir, "cni/bin", filepath.Base(p))))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cni/conf/10-podnet.conflist"), fmt.Appendf(nil,
		`{"cniVersion": "1.0.0", "name": "efakit-e2e", "plugins": [{"type": "podnet", "dataDir": %q}]}`, filepath.Join(dir, "cni/data")), 0o644))

	n.StartContainerd()
	n.importImages()
	n.StartKubelet()
	return n
}

func (n *RealNode) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(n.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(n.T, err)
	return f
}

// inNamespace runs a program in the node's mount namespace (nsenter
// execs it: the PID is the program's).
func (n *RealNode) inNamespace(name string, argv ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.Holder.Process.Pid), "-m", "--"}, argv...)...)
	log := n.logFile(name)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// LogTail is the last size bytes of a process's log on the node.
func (n *RealNode) LogTail(name string, size int) string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, name+".log"))
	if len(b) > size {
		b = b[len(b)-size:]
	}
	return string(b)
}

// StartContainerd starts containerd in the node's mount namespace with
// CDI on, and waits for its socket.
func (n *RealNode) StartContainerd() {
	t := n.T
	conf := fmt.Sprintf(`version = 3
root = %[1]q
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[grpc]
  address = %[2]q
[ttrpc]
  address = %[3]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = [%[5]q]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
`, filepath.Join(n.Dir, "containerd"), n.Sock, n.Sock+".ttrpc", pauseImage, n.CDI, n.Bins.runc,
		filepath.Join(n.Dir, "cni/bin"), filepath.Join(n.Dir, "cni/conf"))
	path := filepath.Join(n.Dir, "containerd.toml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	cmd := n.inNamespace("containerd", n.Bins.containerd, "--config", path)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(n.Bins.shim)+":"+os.Getenv("PATH"))
	require.NoError(t, cmd.Start())
	n.Procs["containerd"] = cmd
	Eventually(t, func() bool {
		return exec.Command(n.Bins.Ctr, "--address", n.Sock, "version").Run() == nil
	}, 60*time.Second, 100*time.Millisecond, func() string { return fmt.Sprintf("containerd; log:\n%s", n.LogTail("containerd", 3000)) })
}

// importImages packs the sandbox image (cmd/pause) and a busybox image
// (Debian's static busybox with its applets linked) as image tarballs and
// imports them into containerd's k8s.io namespace: no registry.
func (n *RealNode) importImages() {
	t := n.T
	pause, err := ImageOf(map[string]string{"/pause": n.Bins.pause}, nil, []string{"/pause"})
	require.NoError(t, err)
	links := map[string]string{}
	for _, a := range []string{"sh", "ls", "cat", "env", "sort", "find", "echo", "sleep", "grep", "stat", "readlink", "true"} {
		links["/bin/"+a] = "busybox"
	}
	busybox, err := ImageOf(map[string]string{"/bin/busybox": n.Bins.Busybox}, links, []string{"/bin/sh"})
	require.NoError(t, err)
	for ref, img := range map[string]v1.Image{pauseImage: pause, BusyboxImage: busybox} {
		tag, err := name.NewTag(ref)
		require.NoError(t, err)
		file := filepath.Join(n.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
		require.NoError(t, tarball.WriteToFile(file, tag, img))
		out, err := exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "images", "import", "--all-platforms", file).CombinedOutput()
		require.NoError(t, err, "ctr images import %s: %s", ref, out)
	}
}

// ImageOf is a one-layer linux/amd64 image of files (path in the image:
// file on the host) and symbolic links (path: target).
func ImageOf(files, links map[string]string, entrypoint []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(p string) error {
		for d := filepath.Dir(p); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	for p, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := addDir(p); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	for p, target := range links {
		if err := addDir(p); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(p, "/"), Linkname: target, Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=/bin"}
	return mutate.ConfigFile(img, cf)
}

// StartKubelet starts the node's kubelet with the configuration a VM
// like this one needs (docs/testing.md), and a pod resync of 10 s (syncFrequency; 1 m by
// default): a pod whose prepare failed in a way the kubelet does not
// count as a sync error (its plugin not yet registered after a reboot, a
// full CDI directory) is tried again at the resync, so the faults' tests
// wait 10-15 s for it instead of 60-90 s. EFAKIT_KUBELET_SYNC_FREQUENCY
// sets another (1m: the kubelet's default, as a real node runs).
func (n *RealNode) StartKubelet() {
	t := n.T
	syncFrequency := cmp.Or(os.Getenv("EFAKIT_KUBELET_SYNC_FREQUENCY"), "10s")
	_, err := time.ParseDuration(syncFrequency)
	require.NoError(t, err, "EFAKIT_KUBELET_SYNC_FREQUENCY")
	healthz, err := FreePort()
	require.NoError(t, err)
	port, err := FreePort()
	require.NoError(t, err)
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
address: 127.0.0.1
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
localStorageCapacityIsolation: false
syncFrequency: %[6]s
podLogsDir: %[4]s
volumePluginDir: %[5]s
`, n.Sock, port, healthz, filepath.Join(n.Dir, "pod-logs"), filepath.Join(n.Dir, "kubelet/volume-plugins"), syncFrequency)
	if len(n.kubeletGates) > 0 {
		conf += "featureGates:\n"
		for _, g := range slices.Sorted(maps.Keys(n.kubeletGates)) {
			conf += fmt.Sprintf("  %s: %t\n", g, n.kubeletGates[g])
		}
	}
	path := filepath.Join(n.Dir, "kubelet.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	cmd := n.inNamespace("kubelet", n.Bins.kubelet, "--config", path, "--kubeconfig", filepath.Join(n.CP.Dir, "admin.kubeconfig"),
		"--hostname-override", n.Name, "--root-dir", n.Kubelet, "--cert-dir", filepath.Join(n.Kubelet, "pki"), "-v", "2")
	require.NoError(t, cmd.Start())
	n.Procs["kubelet"] = cmd
	n.waitReady()
}

// waitReady waits for the node to be Ready and lifts the not-ready taint
// the API server puts on a new node (no node lifecycle controller runs
// here: it would mark the other tests' nodes, which no kubelet updates,
// unreachable).
func (n *RealNode) waitReady() {
	t, ctx := n.T, context.Background()
	var node *corev1.Node
	Eventually(t, func() bool {
		var err error
		node, err = n.CP.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}, 120*time.Second, 200*time.Millisecond, func() string {
		return fmt.Sprintf("node %s Ready; kubelet log:\n%s", n.Name, n.LogTail("kubelet", 4000))
	})
	require.NoError(t, retryOnConflict(func() error {
		node, err := n.CP.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, tn := range node.Spec.Taints {
			if tn.Key != corev1.TaintNodeNotReady {
				keep = append(keep, tn)
			}
		}
		node.Spec.Taints = keep
		_, err = n.CP.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}))
}

func retryOnConflict(f func() error) error {
	for range 20 {
		err := f()
		if !apierrors.IsConflict(err) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return f()
}

// KillAll kills the processes list returns until there are none.
func (n *RealNode) KillAll(list func() []int) {
	for range 100 {
		pids := list()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopProc sends sig to a process of the node and waits for it.
func (n *RealNode) StopProc(name string, sig syscall.Signal, wait time.Duration) {
	cmd := n.Procs[name]
	if cmd == nil {
		return
	}
	delete(n.Procs, name)
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
	}
}

// NamespacePIDs lists the processes in the node's mount namespace other
// than the holder: containerd's shims and the containers' processes
// outlive containerd.
func (n *RealNode) NamespacePIDs() []int {
	if n.Holder == nil {
		return nil
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.Holder.Process.Pid))
	if err != nil {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == n.Holder.Process.Pid {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stop deletes the node's pods and the Node, stops the kubelet and
// containerd, kills what is left in the namespace (shims, containers),
// ends the namespace, and removes the kubelet's cgroups, the mount point
// directories it made and its directory: nothing of it is left.
func (n *RealNode) stop() {
	ctx := context.Background()
	if n.Procs["kubelet"] != nil {
		pods, _ := n.CP.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if pods != nil {
			zero := int64(0)
			for _, p := range pods.Items {
				_ = n.CP.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
		}
	}
	n.stopAccelDrivers()
	for _, name := range []string{"efakit-plugin", "kubelet"} {
		n.StopProc(name, syscall.SIGTERM, 20*time.Second)
	}
	// The containers have mount namespaces of their own: found by the
	// kubelet's cgroups.
	n.KillAll(func() []int { return CgroupPIDs("kubepods") })
	n.StopProc("containerd", syscall.SIGTERM, 20*time.Second)
	for _, cmd := range n.Procs {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	n.Procs = map[string]*exec.Cmd{}
	n.KillAll(n.NamespacePIDs)
	if n.Holder != nil {
		_ = n.Holder.Process.Kill()
		_ = n.Holder.Wait()
		n.Holder = nil
	}
	removeCgroups("kubepods")
	for _, p := range n.made {
		_ = os.Remove(p)
	}
	n.made = nil
	for _, m := range n.mounted {
		_ = exec.Command("umount", "-l", m).Run()
	}
	n.mounted = nil
	_ = n.CP.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
	_ = n.CP.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if os.Getenv("EFAKIT_E2E_KEEP") != "" {
		// For a look at the logs afterwards.
		fmt.Fprintf(os.Stderr, "real node kept in %s\n", n.Dir)
		return
	}
	_ = os.RemoveAll(n.Dir)
}

// cleanStaleNodes ends what a real node of an earlier test binary left
// when that binary was killed before its cleanup (a test timeout): its
// processes (the namespace holder and what runs in its namespace, the
// containers in the kubelet's cgroups), its cgroups, the mount point
// directories it made and its directory.
func cleanStaleNodes() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "efakit-node-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "holder.pid"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && pid > 0 && string(cmd) == "sleep\x00infinity\x00" {
			stale := &RealNode{Holder: &exec.Cmd{Process: &os.Process{Pid: pid}}}
			stale.KillAll(stale.NamespacePIDs)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		(&RealNode{}).KillAll(func() []int { return CgroupPIDs("kubepods") })
		removeCgroups("kubepods")
		if m, err := os.ReadFile(filepath.Join(dir, "mounted")); err == nil {
			_ = exec.Command("umount", "-l", strings.TrimSpace(string(m))).Run()
		}
		if made, err := os.ReadFile(filepath.Join(dir, "made")); err == nil {
			for _, p := range strings.Fields(string(made)) {
				_ = os.Remove(p)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// cgroupRoots lists the cgroup name in each cgroup v1 hierarchy and the
// unified one, where it exists.
func cgroupRoots(name string) []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	if _, err := os.Stat("/sys/fs/cgroup/" + name); err == nil {
		roots = append(roots, "/sys/fs/cgroup/"+name)
	}
	return roots
}

// CgroupPIDs lists the processes in cgroup name and under it, in any
// hierarchy.
func CgroupPIDs(name string) []int {
	seen := map[int]bool{}
	for _, root := range cgroupRoots(name) {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						seen[pid] = true
					}
				}
			}
			return nil
		})
	}
	var pids []int
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// removeCgroups removes the cgroup name, and every cgroup under it, from
// each cgroup v1 hierarchy and the unified one: the kubelet's cgroupfs
// driver made them on the host's cgroup file system.
func removeCgroups(name string) {
	for _, root := range cgroupRoots(name) {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for range 20 {
				if err := syscall.Rmdir(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// Eventually is require.Eventually whose failure message is made when the
// wait has failed (a log as it is then), not when it starts: testify
// evaluates a message's arguments before it polls, so a log passed to it
// is the log from before the wait.
func Eventually(t testing.TB, cond func() bool, timeout, tick time.Duration, msg func() string) {
	t.Helper()
	if !Poll(cond, timeout, tick) {
		t.Fatalf("Condition never satisfied in %s: %s", timeout, msg())
	}
}

// Poll calls cond every tick until it holds or timeout has passed.
func Poll(cond func() bool, timeout, tick time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}
