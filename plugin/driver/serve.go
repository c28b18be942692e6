package driver

import (
	"os"
	"time"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/uevents"
	"github.com/efakit/efakit/plugin/internal/live"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ServeOptions are the plugin daemon's settings (cmd/efakit-plugin's flags).
type ServeOptions struct {
	Config     resources.Config
	KubeClient kubernetes.Interface
	// Paths are where the plugin reads and writes.
	Paths
	// Intervals pace the periodic sysfs scans.
	Intervals
	// PodUID enables rolling updates: two plugin pods may serve during an
	// update, handing over through file locks.
	PodUID types.UID
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
	// ClaimStatus says how prepared claims' status.devices are written.
	ClaimStatus ClaimStatusOptions
	// Class is the single-EFA DeviceClass the chart makes, with the
	// extended resource it declares (vpc.amazonaws.com/efa): read once at
	// start to say whether the API server kept it. Nothing is read when
	// Class.ExtendedResourceName is empty.
	Class resources.ClassOptions
	// Kernel is what the plugin asks of the kernel beyond sysfs.
	Kernel
}

// Kernel is what the plugin asks of the kernel beyond sysfs, each
// replaceable in tests.
type Kernel struct {
	// Uevents opens the source of the kernel's uevents (uevents.Kernel in
	// the daemon): a device added, removed or bound is rescanned within a
	// second. nil for none: the periodic rescans only.
	Uevents func() (uevents.Source, error)
	// Live answers what sysfs does not hold: the kernel's RDMA namespace
	// mode. live.Kernel{} (the default) asks the kernel.
	Live live.Live
	// Sync, when set, is called instead of (*os.File).Sync for each fsync
	// of the files the plugin and the helper's device metadata write:
	// tests count them through it.
	Sync func(*os.File) error
}

// Paths are the directories, files and sockets the plugin uses.
type Paths struct {
	// SysfsRoot is a directory or a capture file (tests run the plugin on
	// a fixture).
	SysfsRoot string
	// ProcRoot holds sys/kernel/random/boot_id, and the files of the
	// GPUDirect judgement: driver/nvidia/params, sys/kernel/osrelease.
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
}

// Intervals pace the periodic sysfs scans: the rescan for changed devices
// (a minute when 0) and the health checks (10 s when 0), which grade the
// devices by HealthPolicy (health.DefaultPolicy when its Window is 0)
// and judge each prepared device idle after IdleAfter without RDMA
// traffic (0: never).
type Intervals struct {
	RescanInterval time.Duration
	HealthInterval time.Duration
	HealthPolicy   health.Policy
	IdleAfter      time.Duration
}

// ClaimStatusOptions say how prepared claims' status.devices are written.
type ClaimStatusOptions struct {
	// Client writes them: a client with a rate limiter of its own
	// (cmd/efakit-plugin makes one), so that the writes never spend the
	// rate the kubelet helper's claim reads, which prepares wait on, are
	// allowed. KubeClient when nil.
	Client kubernetes.Interface
	// Off writes none.
	Off bool
}

// statusClient is the client that writes claims' status, nil for none.
func (o ServeOptions) statusClient() kubernetes.Interface {
	switch {
	case o.ClaimStatus.Off:
		return nil
	case o.ClaimStatus.Client != nil:
		return o.ClaimStatus.Client
	}
	return o.KubeClient
}
