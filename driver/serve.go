package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// ServeOptions are the plugin daemon's settings (cmd/efakit-plugin's flags).
type ServeOptions struct {
	Config     Config
	KubeClient kubernetes.Interface
	// SysfsRoot is a directory or a capture file (tests run the plugin on
	// a fixture).
	SysfsRoot string
	// ProcRoot holds sys/kernel/random/boot_id.
	ProcRoot string
	CDIRoot  string
	// RegistrarDir is the kubelet's plugin registration directory
	// (/var/lib/kubelet/plugins_registry).
	RegistrarDir string
	// PluginsDir is the kubelet's plugins directory
	// (/var/lib/kubelet/plugins); the plugin's socket and checkpoint go in
	// PluginsDir/<driver name>.
	PluginsDir string
	// PodUID enables rolling updates: two plugin pods may serve during an
	// update, handing over through file locks.
	PodUID types.UID
	// RescanInterval and HealthInterval pace the periodic sysfs scans.
	RescanInterval time.Duration
	HealthInterval time.Duration
	// HTTPAddr serves /healthz, /readyz and /metrics; "" for none.
	HTTPAddr string
	// Rescan asks for a scan now (SIGHUP in the daemon).
	Rescan <-chan struct{}
	// Ready is closed once the plugin is registered and has published.
	Ready chan<- struct{}
	// AllowDevicePlugin lets the plugin publish on a node whose capacity
	// shows AWS's EFA device plugin (vpc.amazonaws.com/efa). By default it
	// publishes nothing there and says why: two owners of one EFA would
	// hand it to two pods.
	AllowDevicePlugin bool
	// Live answers what sysfs does not hold: the kernel's RDMA namespace
	// mode. efa.Netlink{} (the default) asks the kernel.
	Live efa.Live
}

// DevicePluginResource is the extended resource of AWS's EFA device plugin.
const DevicePluginResource = "vpc.amazonaws.com/efa"

// netnsCheck returns why the plugin must not publish: in the kernel's
// exclusive RDMA namespace mode an RDMA device lives in one network
// namespace (the host's), so a pod never sees the EFA it was given, and CDI
// cannot move it. A kernel that cannot say (no RDMA netlink) is not a
// reason: the shared mode is the kernel's default.
func netnsCheck(live efa.Live) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		mode, err := live.RDMANetnsMode()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("RDMA namespace mode unknown", "err", err)
			return ""
		}
		if mode == efa.NetnsExclusive {
			return "the kernel's RDMA namespace mode is exclusive: pods would not see their EFAs; set it to shared (rdma system set netns shared)"
		}
		return ""
	}
}

// devicePluginCheck returns why the plugin must stand aside on its node:
// the EFA device plugin's resource in the Node's capacity.
func devicePluginCheck(client kubernetes.Interface, node string) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).Error(err, "reading the node to look for the EFA device plugin")
			return ""
		}
		if q, ok := n.Status.Capacity[DevicePluginResource]; ok && !q.IsZero() {
			return fmt.Sprintf("node %s has %s %s from AWS's EFA device plugin, which owns these EFAs: remove the device plugin from this node (or run with --allow-with-device-plugin)", node, q.String(), DevicePluginResource)
		}
		return ""
	}
}

// Serve runs the kubelet plugin until ctx ends or a fatal error: it restores
// the checkpoint, starts the kubelet registration and DRA gRPC services,
// publishes the node's EFAs, and rescans sysfs periodically and on demand.
func Serve(ctx context.Context, o ServeOptions) error {
	logger := klog.FromContext(ctx)
	if o.Config.NodeName == "" {
		return errors.New("node name is required")
	}
	driverName := o.Config.driverName()
	dataDir := filepath.Join(o.PluginsDir, driverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	if err := os.MkdirAll(o.CDIRoot, 0o755); err != nil {
		return err
	}
	root, err := sysfs.Open(o.SysfsRoot)
	if err != nil {
		return err
	}
	defer root.Close()
	bootID, err := checkpoint.ReadBootID(o.ProcRoot)
	if err != nil {
		return err
	}
	writer, err := cdi.NewWriter(o.CDIRoot, driverName)
	if err != nil {
		return err
	}
	names, _ := pcie.LoadNames()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	plugin, err := NewPlugin(ctx, PluginOptions{Config: o.Config, SysfsRoot: root, Names: names, CDI: writer,
		Store: checkpoint.NewStore(dataDir), BootID: bootID, KubeClient: o.KubeClient, DataDir: dataDir})
	if plugin == nil {
		return err
	}
	if err != nil {
		// A corrupt checkpoint: said loudly, and the plugin goes on.
		logger.Error(err, "restoring prepared claims")
	}
	plugin.Stop = func(err error) { cancel(err) }
	live := o.Live
	if live == nil {
		live = efa.Netlink{}
	}
	checks := []func(context.Context) string{netnsCheck(live)}
	if !o.AllowDevicePlugin {
		checks = append(checks, devicePluginCheck(o.KubeClient, o.Config.NodeName))
	}
	plugin.Precheck = func(ctx context.Context) string {
		for _, check := range checks {
			if reason := check(ctx); reason != "" {
				return reason
			}
		}
		return ""
	}
	if o.HealthInterval > 0 {
		plugin.HealthInterval = o.HealthInterval
	}
	// The first scan fills the inventory before the kubelet can call.
	if _, err := plugin.Rescan(ctx); err != nil {
		logger.Error(err, "scanning sysfs")
	}

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(o.Config.NodeName),
		kubeletplugin.KubeClient(o.KubeClient),
		kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.CDIDirectory(o.CDIRoot),
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(o.PodUID))
	}
	helper, err := kubeletplugin.Start(ctx, plugin, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	plugin.SetPublisher(helper)
	plugin.Recheck(ctx)
	if _, err := plugin.Publish(ctx); err != nil {
		logger.Error(err, "publishing")
	}

	if o.HTTPAddr != "" {
		srv, err := serveHTTP(ctx, o.HTTPAddr, plugin, helper)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if o.Ready != nil {
		close(o.Ready)
	}
	interval := o.RescanInterval
	if interval <= 0 {
		interval = time.Minute
	}
	logger.Info("serving", "driver", driverName, "node", o.Config.NodeName, "devices", plugin.DeviceCount())
	plugin.Run(ctx, interval, o.Rescan)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// serveHTTP serves /healthz (the process runs), /readyz (registered with
// the kubelet) and /metrics.
func serveHTTP(ctx context.Context, addr string, p *Plugin, h *kubeletplugin.Helper) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := h.RegistrationStatus(); st == nil || !st.PluginRegistered {
			http.Error(w, "not registered with the kubelet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(p.Metrics.Registry, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "http server")
		}
	}()
	return srv, nil
}
