package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claims"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/metrics"
	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/publishing"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/sysfs"
)

// run is one serving of the plugin: it starts every activity, in the order
// below, and stops them in the reverse order, waiting for each goroutine.
// docs/design.md lists the same order.
//
// Start:
//  1. the sysfs root, the boot ID, the CDI writer, the checkpoint store
//     and the PodResources client;
//  2. the Node's Events writer (client-go's broadcaster, its goroutines);
//  3. the Plugin, which restores the checkpoint;
//  4. the uevent watch (a goroutine), before the first scan so no change
//     is missed;
//  5. the first scan and the first check for another owner, before the
//     kubelet can call;
//  6. the kubelet helper: stale sockets removed, then registration and
//     the DRA gRPC service (the helper's goroutines);
//  7. the slice publisher and its foreign-slice watch, and the first
//     publish; the DeviceClass's extended resource read once (a
//     goroutine);
//  8. the HTTP server (a goroutine): /healthz, /readyz, /metrics;
//  9. the CDI and storage watch, the claim status writer and the SIGHUP
//     forwarder (goroutines), then the rescan loop, in Serve's own
//     goroutine, until the context ends or a fatal error.
//
// Stop, when the loop returns: the context is cancelled, then the HTTP
// server closes, the publisher stops (its slices stay: the kubelet and the
// next plugin pod own them), the helper stops (unregisters; calls in
// flight end), the uevent watch ends (its socket closed, waited for),
// every other goroutine the run started is waited for (the CDI watch, the
// claim status writer, the SIGHUP forwarder, the HTTP server's, the
// DeviceClass read, a withdrawal before a fatal stop), the Events'
// broadcaster shuts down, and the PodResources client and the sysfs root
// close last.
type run struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	// stops run in reverse order of their registration.
	stops []func()
}

func newRun(ctx context.Context) *run {
	r := &run{}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	return r
}

// spawn starts f in a goroutine that stop waits for.
func (r *run) spawn(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// onStop registers what stop undoes, in reverse order.
func (r *run) onStop(f func()) { r.stops = append(r.stops, f) }

// stop cancels the run and undoes what onStop registered, in reverse
// order; waiting for the goroutines is one of them.
func (r *run) stop() {
	r.cancel(nil)
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

// Serve runs the kubelet plugin until ctx ends or a fatal error: it restores
// the checkpoint, starts the kubelet registration and DRA gRPC services,
// publishes the node's EFAs, and rescans sysfs periodically and on demand.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Config.NodeName == "" {
		return errors.New("node name is required")
	}
	r := newRun(ctx)
	defer r.stop()
	if err := r.serve(o); err != nil {
		return err
	}
	if cause := context.Cause(r.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// serve is the start-up order of run, then the rescan loop.
func (r *run) serve(o ServeOptions) error {
	ctx := r.ctx
	logger := klog.FromContext(ctx)
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

	// 1. What the plugin reads and writes.
	root, err := sysfs.Open(o.SysfsRoot)
	if err != nil {
		return err
	}
	r.onStop(func() { _ = root.Close() })
	if note := root.Note(); note != "" {
		logger.Info("Opened the sysfs root", "path", o.SysfsRoot, "note", note)
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
		r.onStop(func() { _ = c.Close() })
		pods = c
	}
	// 2. Events on the Node, written beside the scans, never in their way
	// (client-go's broadcaster, shut down after the goroutines that
	// record).
	recorder := events.New(ctx, o.KubeClient, o.Config.NodeName, nil)
	r.onStop(recorder.Stop)
	// The goroutines end with the context, which stop cancels first; they
	// are waited for once the helper, the publisher and the HTTP server
	// have stopped, before the Events' broadcaster and what step 1 opened
	// close.
	r.onStop(r.wg.Wait)

	// 3. The Plugin, with every hook it has. Its checks for another owner
	// read the watches step 4 starts (the Node, the node's slices), so
	// that they cost the API server nothing at each rescan.
	kernel := o.Live
	if kernel == nil {
		kernel = live.Kernel{}
	}
	nodes := owners.NewNodeWatch(o.KubeClient, o.Config.NodeName)
	if o.Config.GroupsNodeLabel != "" {
		flag := o.Config.Groups
		mode, err := nodeGroupMode(ctx, o.KubeClient, o.Config)
		if err != nil {
			return err
		}
		o.Config.Groups = mode
		if err := o.Config.CheckSharing(); err != nil {
			return fmt.Errorf("node %s, label %s: %w", o.Config.NodeName, o.Config.GroupsNodeLabel, err)
		}
		stopOnGroupLabel(nodes, o.Config, flag, func(err error) { r.cancel(err) })
	}
	pub := &publishing.Slices{Ctx: ctx, Client: o.KubeClient, DriverName: driverName, NodeName: o.Config.NodeName,
		SyncDelay: publishing.JitteredRepairDelay()}
	plugin, err := NewPlugin(ctx, PluginOptions{Config: o.Config, SysfsRoot: root, ProcRoot: os.DirFS(o.ProcRoot), CDI: writer,
		Store: store, BootID: bootID, KubeClient: o.KubeClient, StatusClient: o.statusClient(), Pods: pods, DataDir: dataDir,
		Hooks: Hooks{Events: recorder, Stop: func(err error) { r.cancel(err) },
			Precheck: owners.All(owners.Netns(kernel),
				owners.Node(nodes, o.AllowDevicePlugin),
				owners.Publishers(pub.Current, driverName, o.Config.NodeName)),
			Spawn: r.spawn},
		Health: HealthOptions{Interval: o.HealthInterval, Policy: o.HealthPolicy, IdleAfter: o.IdleAfter}})
	if plugin == nil {
		return err
	}
	r.onStop(plugin.Close)
	if err != nil {
		// A corrupt checkpoint: said loudly, and the plugin goes on.
		logger.Error(err, "Restoring prepared claims failed")
	}

	// 4. Watched from before the first scan, so no change is missed: the
	// kernel's uevents, the Node, the node's slices of the driver name
	// (another dra.net publisher is checked for at once).
	r.onStop(plugin.startUevents(ctx, o.Uevents))
	r.spawn(func() { nodes.Run(ctx, func() { plugin.askRescan(rescanNode) }) })
	pub.ErrorHandler = func(ctx context.Context, err error, msg string) {
		plugin.HandleError(ctx, fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, err), msg)
	}
	r.onStop(pub.Stop)
	r.spawn(pub.Watch(ctx, func() { plugin.askRescan(rescanSlices) }))

	// 5. The first scan fills the inventory, and the first check for
	// another owner of the EFAs decides, before the kubelet can call.
	if _, err := plugin.Rescan(ctx); err != nil {
		logger.Error(err, "Scanning sysfs failed")
	}
	plugin.Recheck(ctx)

	// 6. Sockets of killed plugin pods, which the kubelet would dial for
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
		kubeletplugin.MetadataFileOps(claims.MetadataFileOps(o.Sync)),
		kubeletplugin.GRPCInterceptor(metrics.StampArrival),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(o.PodUID))
	}
	helper, err := kubeletplugin.Start(ctx, plugin, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	r.onStop(helper.Stop)

	// 7. The slices are published by a controller the plugin can stop
	// without deleting another publisher's slices (see publishing.Slices);
	// checked for another owner before the first publish.
	plugin.SetPublisher(pub)
	if _, err := plugin.Publish(ctx); err != nil {
		logger.Error(err, "Publishing failed")
	}
	// Whether pods that ask for the class's extended resource are served:
	// the API server drops the field where the feature is off.
	r.spawn(func() { checkExtendedResource(ctx, o.KubeClient, o.Class) })

	// 8. /healthz, /readyz, /metrics.
	if o.HTTPAddr != "" {
		if err := r.serveHTTP(o.HTTPAddr, plugin, helper); err != nil {
			return err
		}
	}
	if o.Ready != nil {
		close(o.Ready)
	}

	// 9. The CDI watch and the prepared claims' status.devices, written
	// off the kubelet's calls (the writer's queue ends with the context),
	// then the rescan loop.
	if w := plugin.StatusWriter(); w != nil {
		r.spawn(func() { w.Run(ctx) })
	}
	interval := o.RescanInterval
	if interval <= 0 {
		interval = time.Minute
	}
	logger.Info("Serving", "driver", driverName, "node", o.Config.NodeName, "devices", plugin.DeviceCount())
	r.spawn(func() { plugin.WatchCDI(ctx, plugin.ops.healthInterval) })
	if o.Rescan != nil {
		r.spawn(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-o.Rescan:
					plugin.askRescan(rescanSignal)
				}
			}
		})
	}
	plugin.Run(ctx, interval)
	return nil
}

// serveHTTP serves /healthz (the process runs), /readyz (registered with
// the kubelet, and able to write its CDI specs and checkpoint) and
// /metrics, until the run stops.
func (r *run) serveHTTP(addr string, p *Plugin, h *kubeletplugin.Helper) error {
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
	mux.Handle("/metrics", promhttp.HandlerFor(p.ops.metrics.Registry, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.spawn(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(r.ctx).Error(err, "HTTP server failed")
		}
	})
	r.onStop(func() { _ = srv.Close() })
	return nil
}
