package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// chartPlugin is how the chart runs efakit-plugin: the DaemonSet's
// container arguments and environment, rendered by helm with values.
type chartPlugin struct {
	args   []string
	mounts map[string]string // host path -> container path
}

func renderPlugin(n *RealNode, values ...string) chartPlugin {
	var ds *appsv1.DaemonSet
	for _, o := range Render(n.T, values...) {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *resourceapi.DeviceClass:
			// The chart's classes, as helm install creates them.
			_, err := n.CP.Client.ResourceV1().DeviceClasses().Create(context.Background(), o, metav1.CreateOptions{})
			require.NoError(n.T, CreateIgnoreExists(err))
		}
	}
	require.NotNil(n.T, ds)
	spec := ds.Spec.Template.Spec
	cp := chartPlugin{args: spec.Containers[0].Args, mounts: map[string]string{}}
	for _, v := range spec.Volumes {
		for _, m := range spec.Containers[0].VolumeMounts {
			if m.Name == v.Name && v.HostPath != nil {
				cp.mounts[v.HostPath.Path] = m.MountPath
			}
		}
	}
	return cp
}

// StartEFAKit runs the efakit-plugin binary on the node with the chart's
// arguments for the given values. The paths the chart mounts from the host
// become the node's directories (the kubelet's plugin and registration
// directories, the CDI directory containerd reads) and the fixture for
// /sys; the metrics address moves to a free loopback port; the plugin
// talks to the API server with a kubeconfig (no in-cluster network
// here), and reads the boot ID from the node's proc directory.
func (n *RealNode) StartEFAKit(fixture string, values ...string) {
	t := n.T
	bin, err := PluginBinary()
	require.NoError(t, err)
	cp := renderPlugin(n, values...)
	host := map[string]string{ // the chart's host path -> this node's
		"/sys":                              n.Unpack(fixture),
		"/var/lib/kubelet/plugins/dra.net":  filepath.Join(n.Kubelet, "plugins", "dra.net"),
		"/var/lib/kubelet/plugins_registry": filepath.Join(n.Kubelet, "plugins_registry"),
		"/var/lib/kubelet/pod-resources":    filepath.Join(n.Kubelet, "pod-resources"),
		"/var/run/cdi":                      n.CDI,
	}
	// The flag names the plugins directory; the chart mounts only the
	// driver's directory in it.
	inPod := map[string]string{"/var/lib/kubelet/plugins": filepath.Join(n.Kubelet, "plugins"),
		"/var/lib/kubelet/pod-resources/kubelet.sock": filepath.Join(n.Kubelet, "pod-resources", "kubelet.sock")}
	for h, c := range cp.mounts {
		to, ok := host[h]
		require.True(t, ok, "the chart mounts %s from the host: map it to the node", h)
		inPod[c] = to
	}
	port, err := FreePort()
	require.NoError(t, err)
	var args []string
	for _, a := range cp.args {
		k, v, _ := strings.Cut(a, "=")
		if to, ok := inPod[v]; ok {
			v = to
		}
		if k == "--http-address" {
			v = fmt.Sprintf("127.0.0.1:%d", port)
		}
		args = append(args, k+"="+v)
	}
	if _, err := os.Stat(filepath.Join(n.Dir, "proc")); err != nil {
		n.SetBootID("3d1f0c52-6a0e-4b8e-9a57-0c4f0d7e2b10")
	}
	args = append(args, "--kubeconfig="+filepath.Join(n.CP.Dir, "admin.kubeconfig"), "--proc="+filepath.Join(n.Dir, "proc"))
	// In the node's mount namespace, as the DaemonSet's pod sees the
	// kubelet's and the runtime's mounts (a CDI directory of its own).
	n.PluginHTTP = fmt.Sprintf("http://127.0.0.1:%d", port)
	for try := 1; ; try++ {
		cmd := n.inNamespace("efakit-plugin", append([]string{bin}, args...)...)
		// As the DaemonSet's environment sets them.
		cmd.Env = append(os.Environ(), "NODE_NAME="+n.Name, "POD_UID="+string(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", time.Now().UnixNano()%1e12))))
		fmt.Fprintf(cmd.Stdout.(*os.File), "%s%s\n", pluginHeader, strings.Join(args, " "))
		require.NoError(t, cmd.Start())
		n.Procs["efakit-plugin"] = cmd
		// Registered by the real kubelet: its readiness says so.
		if assert.Eventually(t, func() bool { return httpOK(n.PluginHTTP + "/readyz") }, 60*time.Second, 100*time.Millisecond,
			"efakit-plugin ready (registered with the kubelet)") {
			return
		}
		report := n.procReport("efakit-plugin")
		log := n.PluginLog()
		// A program that never wrote a line (its first is "Starting") and
		// is not the plugin, or is gone: nsenter did not get to run it.
		// That is this harness, not the plugin: said, and tried once more.
		if try == 1 && log == "" && !strings.Contains(report, "\nstacks:") {
			t.Logf("efakit-plugin never ran; starting it again:\n%s", report)
			n.StopProc("efakit-plugin", syscall.SIGKILL, 10*time.Second)
			continue
		}
		t.Fatalf("efakit-plugin not ready:\n%s\nlog since it started:\n%s", report, LastBytes(log, 60000))
	}
}

// pluginHeader starts the line the node writes in the plugin's log before
// each start.
const pluginHeader = "=== efakit-plugin "

// PluginLog is what the plugin wrote since its last start.
func (n *RealNode) PluginLog() string {
	log := n.LogTail("efakit-plugin", 1<<22)
	if i := strings.LastIndex(log, pluginHeader); i >= 0 {
		log = log[i:]
		if j := strings.IndexByte(log, '\n'); j >= 0 {
			return log[j+1:]
		}
		return ""
	}
	return log
}

// LastBytes is the last n bytes of s.
func LastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// procReport says what a process of the node is doing, for a test that
// waited on it in vain: the program it runs (nsenter had not run it yet?),
// its state, where the kernel holds it, and, for a Go program, every
// goroutine's stack (SIGQUIT makes it print them to its log and exit).
func (n *RealNode) procReport(name string) string {
	cmd := n.Procs[name]
	if cmd == nil || cmd.Process == nil {
		return name + ": not started"
	}
	pid := cmd.Process.Pid
	read := func(f string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d: %s\n", pid, read("cmdline"))
	status := read("status")
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "Threads:") || strings.HasPrefix(l, "VmRSS:") {
			fmt.Fprintln(&b, l)
		}
	}
	fmt.Fprintf(&b, "wchan: %s\nkernel stack:\n%s\n", read("wchan"), read("stack"))
	if strings.Contains(read("cmdline"), "efakit-plugin") && cmd.Process.Signal(syscall.SIGQUIT) == nil {
		time.Sleep(3 * time.Second) // the runtime prints the stacks, then exits
		b.WriteString("\nstacks: sent SIGQUIT; the goroutines' stacks are in the log\n")
	}
	return b.String()
}

// Unpack writes a fixture capture out as a directory tree under the
// node's directory, once, and returns it: the plugin reads it as it reads
// /sys, and a test can change a file (a port going DOWN) while it runs.
func (n *RealNode) Unpack(fixture string) string {
	dir := filepath.Join(n.Dir, "sys", filepath.Base(fixture))
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	f, err := os.Open(fixture)
	require.NoError(n.T, err)
	defer f.Close()
	entries, err := sysfs.ParseCapture(f)
	require.NoError(n.T, err)
	require.NoError(n.T, sysfs.WriteDir(dir, entries))
	return dir
}

// KillEFAKit stops the plugin with sig (SIGTERM as the kubelet stops a
// pod, SIGKILL for a crash).
func (n *RealNode) KillEFAKit(sig syscall.Signal) {
	n.StopProc("efakit-plugin", sig, 20*time.Second)
}

// SetBootID writes the kernel boot ID the plugin reads.
func (n *RealNode) SetBootID(id string) {
	dir := filepath.Join(n.Dir, "proc/sys/kernel/random")
	require.NoError(n.T, os.MkdirAll(dir, 0o755))
	require.NoError(n.T, os.WriteFile(filepath.Join(dir, "boot_id"), []byte(id+"\n"), 0o644))
}

// AccelDriver stands in for NVIDIA's GPU driver or the Neuron DRA driver
// on the real node: a kubelet plugin (the same helper library) that
// publishes the fixture's accelerators with the attributes those drivers
// publish (resource.kubernetes.io/pcieRoot and pciBusID for GPUs,
// resource.aws.com/devicegroup{1,4,8,16}_id for Neuron devices) and
// prepares them as CDI devices that set one variable per device, so a
// container shows which accelerators it got.
type AccelDriver struct {
	Name   string
	Kind   string // CDI kind
	helper *kubeletplugin.Helper
	Spec   []byte // its CDI spec, and the file it is written to
	File   string
}

// PrepareResourceClaims answers with the claims' devices of the stand-in's
// driver, each by its CDI device.
func (a *AccelDriver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver == a.Name {
				r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{res.Request}, PoolName: res.Pool, DeviceName: res.Device,
					CDIDeviceIDs: []string{a.Kind + "=" + res.Device}})
			}
		}
		out[c.UID] = r
	}
	return out, nil
}

// UnprepareResourceClaims has nothing to undo.
func (a *AccelDriver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError ignores the helper's background errors.
func (a *AccelDriver) HandleError(ctx context.Context, err error, msg string) {}

// WatchHealthStatus is not served (HealthService(false)).
func (a *AccelDriver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}

// AccelEnv is the variable an accelerator's CDI device sets: E2E_GPU_0=...
func AccelEnv(device string) string {
	return "E2E_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(device))
}

// StartAccelDriver starts the stand-in for the fixture's accelerators
// (none where it has none) and returns the devices it published.
func (n *RealNode) StartAccelDriver(fixture string) map[string]resourceapi.Device {
	t, ctx := n.T, context.Background()
	topo := ScanFixture(t, fixture)
	drv, kind, devs := resources.GPUDeviceClass, "gpu.nvidia.com/gpu", gpuDevices(topo)
	if len(devs) == 0 {
		drv, kind, devs = resources.NeuronDeviceClass, "neuron.aws.com/neuron", NeuronDevices(topo)
	}
	if len(devs) == 0 {
		return nil
	}
	_, err := n.CP.Client.ResourceV1().DeviceClasses().Create(ctx, AccelClass(drv), metav1.CreateOptions{})
	require.NoError(t, CreateIgnoreExists(err))

	spec := cdispec.Spec{Version: "0.6.0", Kind: kind}
	out := map[string]resourceapi.Device{}
	for _, d := range devs {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: d.Name, ContainerEdits: cdispec.ContainerEdits{Env: []string{AccelEnv(d.Name) + "=1"}}})
		out[d.Name] = d
	}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	data := filepath.Join(n.Kubelet, "plugins", drv)
	require.NoError(t, os.MkdirAll(data, 0o750))
	a := &AccelDriver{Name: drv, Kind: kind, Spec: b, File: filepath.Join(n.CDI, "e2e-"+drv+".json")}
	require.NoError(t, os.WriteFile(a.File, a.Spec, 0o644))
	a.helper, err = kubeletplugin.Start(ctx, a, kubeletplugin.DriverName(drv), kubeletplugin.NodeName(n.Name), kubeletplugin.KubeClient(n.CP.Client),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(n.Kubelet, "plugins_registry")), kubeletplugin.PluginDataDirectoryPath(data), kubeletplugin.HealthService(false))
	require.NoError(t, err)
	n.Accel = append(n.Accel, a)
	require.NoError(t, a.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{n.Name: {Slices: []resourceslice.Slice{{Devices: devs}}}}}))
	return out
}

func (n *RealNode) stopAccelDrivers() {
	for _, a := range n.Accel {
		a.helper.Stop()
	}
	n.Accel = nil
}
