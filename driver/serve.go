package driver

import (
	"context"
	"errors"
	"fmt"
	"github.com/efakit/efakit/driver/resources"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
	"github.com/efakit/efakit/driver/podresources"
	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
)

// ServeOptions are the plugin daemon's settings (cmd/efakit-plugin's flags).
type ServeOptions struct {
	Config     resources.Config
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
	// PodResourcesSocket is the kubelet's PodResources API
	// (podresources.DefaultSocket): which containers use which claims,
	// for the libfabric environment's check. "" for none.
	PodResourcesSocket string
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
	// Uevents opens the source of the kernel's uevents (KernelUevents in
	// the daemon): a device added, removed or bound is rescanned within a
	// second. nil for none: the periodic rescans only.
	Uevents func() (UeventSource, error)
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
	// Sync, when set, is called instead of (*os.File).Sync for each fsync
	// of the files the plugin and the helper's device metadata write:
	// tests count them through it.
	Sync func(*os.File) error
}

// netnsCheck says to stand aside in the kernel's exclusive RDMA namespace
// mode: an RDMA device lives in one network namespace (the host's), so a
// pod never sees the EFA it was given, and CDI cannot move it. A kernel
// that cannot say (no RDMA netlink) is not a reason: the shared mode is
// the kernel's default.
func netnsCheck(live efa.Live) func(ctx context.Context) (Verdict, error) {
	var mu sync.Mutex
	var unknown string // the last error, logged once, not at every scan
	return func(ctx context.Context) (Verdict, error) {
		mode, err := live.RDMANetnsMode()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if err.Error() != unknown {
				klog.FromContext(ctx).Info("RDMA namespace mode unknown; taking the kernel's default, shared", "err", err)
			}
			unknown = err.Error()
			return Verdict{}, nil
		}
		if unknown != "" {
			klog.FromContext(ctx).Info("RDMA namespace mode known again", "mode", mode)
			unknown = ""
		}
		if mode == efa.NetnsExclusive {
			return Verdict{Key: "netns", Reason: "the kernel's RDMA namespace mode is exclusive: pods would not see their EFAs; set it to shared (rdma system set netns shared)"}, nil
		}
		return Verdict{}, nil
	}
}

// nodeCheck says to stand aside where the Node shows another owner of its
// EFAs: the EFA device plugin's resource in its capacity (unless allowed),
// or EKS Auto Mode, whose nodes run AWS's own DRA driver as dra.net.
func nodeCheck(client kubernetes.Interface, node string, allowDevicePlugin bool) func(ctx context.Context) (Verdict, error) {
	return func(ctx context.Context) (Verdict, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return Verdict{}, fmt.Errorf("reading node %s: %w", node, err)
		}
		if v := n.Labels[resources.AutoModeLabel]; v == resources.AutoModeValue {
			return Verdict{Key: "dra-driver", Reason: fmt.Sprintf("node %s is an EKS Auto Mode node (%s=%s), whose own DRA driver publishes its EFAs as dra.net: two publishers of one pool would fight; keep efakit off Auto Mode nodes (the chart's default affinity does)", node, resources.AutoModeLabel, v)}, nil
		}
		if q, ok := n.Status.Capacity[resources.DevicePluginResource]; ok && !q.IsZero() && !allowDevicePlugin {
			return Verdict{Key: "device-plugin", Reason: fmt.Sprintf("node %s has %s %s from AWS's EFA device plugin, which owns these EFAs: remove the device plugin from this node (or run with --allow-with-device-plugin)", node, q.String(), resources.DevicePluginResource)}, nil
		}
		return Verdict{}, nil
	}
}

// publisherCheck says to stand aside where ResourceSlices of the driver
// name on the node hold devices efakit does not write: another dra.net
// driver publishes there.
func publisherCheck(client kubernetes.Interface, driverName, node string) func(ctx context.Context) (Verdict, error) {
	return func(ctx context.Context) (Verdict, error) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"spec.driver": driverName, "spec.nodeName": node}.String()})
		if err != nil {
			return Verdict{}, fmt.Errorf("listing the %s ResourceSlices of node %s: %w", driverName, node, err)
		}
		if foreign := resources.ForeignSlices(l.Items, driverName, node); len(foreign) > 0 {
			return Verdict{Key: "dra-driver", Reason: fmt.Sprintf("another %s driver publishes on node %s (%s): two publishers of one driver name fight over the node's slices; remove one of them", driverName, node, strings.Join(foreign, "; "))}, nil
		}
		return Verdict{}, nil
	}
}

// prechecks runs the checks in order: the first reason to stand aside
// wins; with none, an error of any check means the plugin cannot tell.
func prechecks(checks ...func(context.Context) (Verdict, error)) func(context.Context) (Verdict, error) {
	return func(ctx context.Context) (Verdict, error) {
		var errs []error
		for _, check := range checks {
			v, err := check(ctx)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if v.Reason != "" {
				return v, nil
			}
		}
		return Verdict{}, errors.Join(errs...)
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
	driverName := o.Config.Driver()
	dataDir := filepath.Join(o.PluginsDir, driverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	// The chart's hostPath (DirectoryOrCreate) makes it 0755: the
	// checkpoint and device metadata are the plugin's and the kubelet's.
	if err := os.Chmod(dataDir, 0o750); err != nil {
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
	if note := root.Note(); note != "" {
		logger.Info("sysfs root", "path", o.SysfsRoot, "note", note)
	}
	bootID, err := checkpoint.ReadBootID(o.ProcRoot)
	if err != nil {
		return err
	}
	writer, err := cdi.NewWriter(o.CDIRoot, driverName)
	if err != nil {
		return err
	}
	writer.Sync = o.Sync
	store := checkpoint.NewStore(dataDir)
	store.Sync = o.Sync
	var pods PodLister
	if o.PodResourcesSocket != "" {
		c, err := podresources.New(o.PodResourcesSocket)
		if err != nil {
			return err
		}
		defer c.Close()
		pods = c
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	plugin, err := NewPlugin(ctx, PluginOptions{Config: o.Config, SysfsRoot: root, CDI: writer,
		Store: store, BootID: bootID, KubeClient: o.KubeClient, Pods: pods, DataDir: dataDir})
	if plugin == nil {
		return err
	}
	if err != nil {
		// A corrupt checkpoint: said loudly, and the plugin goes on.
		logger.Error(err, "restoring prepared claims")
	}
	plugin.Stop = func(err error) { cancel(err) }
	// Events on the Node, written beside the scans, never in their way.
	plugin.Events = NewEvents(o.KubeClient, o.Config.NodeName)
	go plugin.Events.Run(ctx)
	live := o.Live
	if live == nil {
		live = efa.Netlink{}
	}
	plugin.Precheck = prechecks(netnsCheck(live),
		nodeCheck(o.KubeClient, o.Config.NodeName, o.AllowDevicePlugin),
		publisherCheck(o.KubeClient, driverName, o.Config.NodeName))
	if o.HealthInterval > 0 {
		plugin.HealthInterval = o.HealthInterval
	}
	// Watched from before the first scan, so no change is missed.
	defer plugin.startUevents(ctx, o.Uevents)()
	// The first scan fills the inventory, and the first check for another
	// owner of the EFAs decides, before the kubelet can call.
	if _, err := plugin.Rescan(ctx); err != nil {
		logger.Error(err, "scanning sysfs")
	}
	plugin.Recheck(ctx)

	// Sockets of killed plugin pods, which the kubelet would dial for
	// ever: gone before this pod registers.
	removeStaleSockets(ctx, o.RegistrarDir, dataDir, driverName)
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(o.Config.NodeName),
		kubeletplugin.KubeClient(o.KubeClient),
		kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.CDIDirectory(o.CDIRoot),
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
		kubeletplugin.MetadataFileOps(metadataFileOps(o.Sync)),
		kubeletplugin.GRPCInterceptor(stampArrival),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(o.PodUID))
	}
	helper, err := kubeletplugin.Start(ctx, plugin, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	// The slices are published by a controller the plugin can stop without
	// deleting another publisher's slices (see SlicePublisher); checked
	// for another owner before the first publish.
	pub := &SlicePublisher{Ctx: ctx, Client: o.KubeClient, DriverName: driverName, NodeName: o.Config.NodeName,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			plugin.HandleError(ctx, fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, err), msg)
		}}
	defer pub.Stop()
	pub.Watch(ctx, func() { plugin.askRescan(rescanSlices) })
	plugin.SetPublisher(pub)
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
	go plugin.WatchCDI(ctx, plugin.HealthInterval)
	plugin.Run(ctx, interval, o.Rescan)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// serveHTTP serves /healthz (the process runs), /readyz (registered with
// the kubelet, and able to write its CDI specs and checkpoint) and
// /metrics.
func serveHTTP(ctx context.Context, addr string, p *Plugin, h *kubeletplugin.Helper) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := h.RegistrationStatus(); st == nil || !st.PluginRegistered {
			http.Error(w, "not registered with the kubelet", http.StatusServiceUnavailable)
			return
		}
		if why := p.StorageProblem(); why != "" {
			http.Error(w, "cannot prepare: "+why, http.StatusServiceUnavailable)
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
