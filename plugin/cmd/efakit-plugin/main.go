// Command efakit-plugin is the DRA kubelet plugin that publishes a node's
// EFAs as ResourceSlices and prepares them for pods through CDI. It only
// wires flags to driver.Serve.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa/health"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/uevents"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: efakit-plugin [flags]

The DRA kubelet plugin: publishes the node's EFAs as ResourceSlices and
prepares them for pods through CDI. --node-name (or NODE_NAME) is required.

flags:
`

// Defaults of the plugin's API client rate. client-go's own (5 requests a
// second, bursts of 10) held a node filling at once: the kubelet-plugin
// helper reads each claim before it calls the plugin, so the eleventh pod
// of a burst waited for the client's limiter, and the 32nd more than four
// seconds (docs/performance.md, "Pod start"). These are the kubelet's
// defaults: a node's worst burst (every EFA claimed at once: 32 claim
// reads, the slices and a few Events) stays inside the burst.
const (
	defaultKubeAPIQPS   = 50
	defaultKubeAPIBurst = 100
)

// options are the plugin's settings, from its flags and environment.
type options struct {
	serve        driver.ServeOptions
	kubeconfig   string
	kubeAPIQPS   float64
	kubeAPIBurst int
	showVersion  bool
}

// flagEnv names the environment variable of each of the plugin's flags:
// where the command line does not set the flag, a variable that is set
// gives its value, parsed as the flag would be.
var flagEnv = []struct{ flag, env string }{
	{"node-name", "NODE_NAME"},
	{"driver-name", "DRIVER_NAME"},
	{"groups", "EFA_GROUPS"},
	{"groups-node-label", "EFA_GROUPS_NODE_LABEL"},
	{"sharing", "EFA_SHARING"},
	{"shares", "EFA_SHARES"},
	{"numa-list", "NUMA_LIST"},
	{"sysfs", "SYSFS_ROOT"},
	{"proc", "PROC_ROOT"},
	{"cdi-root", "CDI_ROOT"},
	{"kubelet-registrar-directory-path", "KUBELET_REGISTRAR_DIRECTORY_PATH"},
	{"kubelet-plugins-directory-path", "KUBELET_PLUGINS_DIRECTORY_PATH"},
	{"pod-resources-socket", "POD_RESOURCES_SOCKET"},
	{"rescan-interval", "RESCAN_INTERVAL"},
	{"uevents", "UEVENTS"},
	{"health-interval", "HEALTH_INTERVAL"},
	{"health-window", "HEALTH_WINDOW"},
	{"health-limits", "HEALTH_LIMITS"},
	{"idle-after", "IDLE_AFTER"},
	{"unhealthy-taint-effect", "UNHEALTHY_TAINT_EFFECT"},
	{"http-address", "HTTP_ADDRESS"},
	{"allow-with-device-plugin", "ALLOW_EFA_DEVICE_PLUGIN"},
	{"claim-status", "CLAIM_STATUS"},
	{"device-class-name", "DEVICE_CLASS_NAME"},
	{"extended-resource-name", "EXTENDED_RESOURCE_NAME"},
	{"kubeconfig", "KUBECONFIG"},
	{"kube-api-qps", "KUBE_API_QPS"},
	{"kube-api-burst", "KUBE_API_BURST"},
}

// fromEnv sets each flag the command line left alone from its variable,
// and says which variable holds a value its flag refuses.
func fromEnv(fl *flag.FlagSet) error {
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, fe := range flagEnv {
		v, ok := os.LookupEnv(fe.env)
		if !ok || v == "" || set[fe.flag] {
			continue
		}
		if err := fl.Set(fe.flag, v); err != nil {
			want := map[string]string{"float": "a number", "int": "an integer", "duration": "a duration such as 30s", "": "true or false"}
			kind, _ := flag.UnquoteUsage(fl.Lookup(fe.flag))
			if w, ok := want[kind]; ok {
				return fmt.Errorf("%s=%q: not %s (--%s)", fe.env, v, w, fe.flag)
			}
			return fmt.Errorf("%s=%q: %v (--%s)", fe.env, v, err, fe.flag)
		}
	}
	return nil
}

// parseArgs reads and checks every flag and argument. It runs before
// anything reaches the cluster, so that a missing or bad --node-name is
// said as such rather than hidden behind the API client's error. When ok is
// false the process ends with code: 0 after --help (the usage on stdout), 2
// after a usage error (on stderr).
func parseArgs(args []string, stdout, stderr io.Writer) (o options, code int, ok bool) {
	fl := flag.NewFlagSet("efakit-plugin", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {} // printed below, on stdout or stderr
	klog.InitFlags(fl)
	s := &o.serve
	nodeName := fl.String("node-name", "", "the node this plugin runs on (required)")
	driverName := fl.String("driver-name", resources.DefaultDriverName, "DRA driver name")
	groups := fl.String("groups", "none", "publish EFA group devices: none, exclusive (one device per PCIe root instead of single EFAs) or mixed (both, with shared counters; needs DRAPartitionableDevices)")
	fl.StringVar(&s.Config.GroupsNodeLabel, "groups-node-label", "", "a node label whose value (none, exclusive or mixed) sets the node's group mode in place of --groups; read at start, and the plugin stops (to be started again) when it changes. \"\": --groups on every node")
	sharing := fl.String("sharing", "none", "let independent claims share an EFA: none, or capacity (each EFA published with --shares shares, each claim takes one unless it asks for more; needs DRAConsumableCapacity, Kubernetes 1.36 or later, and --groups=none)")
	fl.Int64Var(&s.Config.Shares, "shares", resources.DefaultShares, "shares of each EFA with --sharing=capacity (1 to 1024)")
	fl.BoolVar(&s.Config.NUMAList, "numa-list", false, "publish resource.kubernetes.io/numaNode in list form (clusters with DRAListTypeAttributes)")
	fl.StringVar(&s.SysfsRoot, "sysfs", "/sys", "sysfs to scan: the host's /sys, or a capture file")
	fl.StringVar(&s.ProcRoot, "proc", "/proc", "procfs, for the kernel's boot ID, the kernel release and the NVIDIA driver's parameters (GPUDirect readiness in claim status)")
	fl.StringVar(&s.CDIRoot, "cdi-root", "/var/run/cdi", "directory for CDI specs")
	fl.StringVar(&s.RegistrarDir, "kubelet-registrar-directory-path", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	fl.StringVar(&s.PluginsDir, "kubelet-plugins-directory-path", kubeletplugin.KubeletPluginsDir, "the kubelet's plugins directory")
	fl.StringVar(&s.PodResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "the kubelet's PodResources API socket: which containers use which claims, for the libfabric environment's check (\"\" for none: such claims are refused)")
	fl.DurationVar(&s.RescanInterval, "rescan-interval", time.Minute, "how often sysfs is scanned for changed devices (SIGHUP scans now)")
	watchUevents := fl.Bool("uevents", true, "rescan within a second of the kernel's uevents for PCI, RDMA and uverbs devices (false: the periodic rescans only)")
	fl.DurationVar(&s.HealthInterval, "health-interval", 10*time.Second, "how often device health is checked (whether or not the kubelet reads it) and reported to the kubelet")
	s.HealthPolicy = health.DefaultPolicy()
	fl.DurationVar(&s.HealthPolicy.Window, "health-window", s.HealthPolicy.Window, "how far back the health rules count an EFA's counters and port state changes")
	healthLimits := fl.String("health-limits", "", "rule=limit,... over the defaults "+s.HealthPolicy.Limits()+": each rule grades an EFA whose counters advance by its limit within --health-window (0 turns a rule off); docs/operations.md has the rules")
	fl.DurationVar(&s.IdleAfter, "idle-after", 15*time.Minute, "how long a prepared claim's EFA may carry no RDMA traffic (its send, receive, RDMA read and write byte counters) before the claim's TrafficSeen condition is False, an Event goes on the claim and efakit_plugin_idle_claims counts it (0: not judged)")
	unhealthyEffect := fl.String("unhealthy-taint-effect", "NoSchedule", "the effect of an unhealthy EFA's taint: NoSchedule (new claims avoid it) or NoExecute (also evicts the pods using it that do not tolerate it)")
	fl.StringVar(&s.HTTPAddr, "http-address", ":8080", "address for /healthz, /readyz and /metrics (\"\" for none)")
	fl.BoolVar(&s.AllowDevicePlugin, "allow-with-device-plugin", false, "publish even where AWS's EFA device plugin (vpc.amazonaws.com/efa) runs on the node")
	claimStatus := fl.Bool("claim-status", true, "write each prepared claim's status.devices (Ready, Healthy, the EFA's data), with an API client rate of its own (--kube-api-qps and --kube-api-burst again)")
	fl.StringVar(&s.Class.ClassName, "device-class-name", resources.DefaultDeviceClass, "the single-EFA DeviceClass, whose --extended-resource-name is checked at start")
	fl.StringVar(&s.Class.ExtendedResourceName, "extended-resource-name", "", "the extended resource the DeviceClass declares (the chart's deviceClasses.extendedResourceName): the plugin says at start whether the API server kept it (\"\" for no check)")
	fl.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fl.Float64Var(&o.kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS, "requests a second the plugin's API client sends on average, bursts aside")
	fl.IntVar(&o.kubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst, "requests the plugin's API client may send at once above --kube-api-qps")
	for _, fe := range flagEnv {
		f := fl.Lookup(fe.flag)
		f.Usage += " (env " + fe.env + ")"
	}
	fl.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	writeUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fl.SetOutput(w)
		fl.PrintDefaults()
		fl.SetOutput(stderr)
	}
	usageError := func(format string, args ...any) (options, int, bool) {
		fmt.Fprintf(stderr, "efakit-plugin: "+format+"\n", args...)
		return options{}, 2, false
	}
	err := fl.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeUsage(stdout)
		return options{}, 0, false
	case err != nil:
		writeUsage(stderr)
		return options{}, 2, false
	case fl.NArg() > 0:
		fmt.Fprintf(stderr, "efakit-plugin: unexpected argument %q (flags only)\n", fl.Arg(0))
		writeUsage(stderr)
		return options{}, 2, false
	case o.showVersion:
		return o, 0, true
	}
	if err := fromEnv(fl); err != nil {
		return usageError("%v", err)
	}
	switch {
	case *nodeName == "":
		return usageError("--node-name (or NODE_NAME) is required")
	case o.kubeAPIQPS <= 0:
		return usageError("--kube-api-qps %v: must be above 0", o.kubeAPIQPS)
	case o.kubeAPIBurst < 1:
		return usageError("--kube-api-burst %d: must be at least 1", o.kubeAPIBurst)
	}
	// The API refuses a slice for a node whose name is not a Node's.
	if msgs := validation.IsDNS1123Subdomain(*nodeName); len(msgs) > 0 {
		return usageError("--node-name %q is not a valid node name: %s", *nodeName, strings.Join(msgs, "; "))
	}
	mode, err := resources.ParseGroupMode(*groups)
	if err != nil {
		return usageError("--groups: %v", err)
	}
	if l := s.Config.GroupsNodeLabel; l != "" {
		if msgs := validation.IsQualifiedName(l); len(msgs) > 0 {
			return usageError("--groups-node-label %q is not a label name: %s", l, strings.Join(msgs, "; "))
		}
	}
	share, err := resources.ParseSharingMode(*sharing)
	if err != nil {
		return usageError("--sharing: %v", err)
	}
	s.Config.NodeName, s.Config.DriverName, s.Config.Groups, s.Config.Sharing = *nodeName, *driverName, mode, share
	if err := s.Config.CheckSharing(); err != nil {
		return usageError("--sharing: %v", err)
	}
	if err := s.HealthPolicy.ParseLimits(*healthLimits); err != nil {
		return usageError("--health-limits: %v", err)
	}
	if err := s.HealthPolicy.Validate(); err != nil {
		return usageError("--health-window: %v", err)
	}
	switch effect := resourceapi.DeviceTaintEffect(*unhealthyEffect); effect {
	case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
		s.Config.UnhealthyEffect = effect
	default:
		return usageError("--unhealthy-taint-effect %q: NoSchedule or NoExecute", *unhealthyEffect)
	}
	s.Class.DriverName = *driverName
	s.ClaimStatus.Off = !*claimStatus
	if *watchUevents {
		s.Uevents = uevents.Kernel
	}
	s.PodUID = types.UID(os.Getenv("POD_UID"))
	return o, 0, true
}

// run is main without the exit: every flag is checked first, then the
// cluster is reached, then the plugin serves until SIGTERM or a fatal error.
func run(args []string, stdout, stderr io.Writer) int {
	opts, code, ok := parseArgs(args, stdout, stderr)
	if !ok {
		return code
	}
	if opts.showVersion {
		fmt.Fprintln(stdout, "efakit-plugin", version)
		return 0
	}
	limit := limitMemory(os.Getenv)
	o := opts.serve
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := klog.Background().WithValues("node", o.Config.NodeName)
	ctx = klog.NewContext(ctx, logger)

	var cfg *rest.Config
	var err error
	if opts.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		logger.Error(err, "Reading the Kubernetes client configuration failed")
		klog.Flush()
		return 1
	}
	cfg.QPS, cfg.Burst = float32(opts.kubeAPIQPS), opts.kubeAPIBurst
	if o.KubeClient, err = kubernetes.NewForConfig(cfg); err != nil {
		logger.Error(err, "Making the Kubernetes client failed")
		klog.Flush()
		return 1
	}
	// The claim status writes get a rate limiter of their own: the
	// kubelet-plugin helper reads each claim before a prepare through
	// KubeClient's, and a burst of status writes must not delay them.
	if !o.ClaimStatus.Off {
		if o.ClaimStatus.Client, err = kubernetes.NewForConfig(rest.CopyConfig(cfg)); err != nil {
			logger.Error(err, "Making the Kubernetes client failed")
			klog.Flush()
			return 1
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	rescan := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case rescan <- struct{}{}:
			default:
			}
		}
	}()
	o.Rescan = rescan
	// Start-up's pages are given back (releaseStartupPages) once the plugin
	// serves and its first periodic rescan is due: start-up is over, and a
	// binary just unpacked from its image has been written back by then
	// (the kernel writes dirty pages within 30 s by default, and keeps them
	// mapped until it has).
	ready := make(chan struct{})
	o.Ready = ready
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
		t := time.NewTimer(o.RescanInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := releaseStartupPages("/proc/self/maps", reflect.ValueOf(releaseStartupPages).Pointer())
		if err != nil {
			logger.Info("Start-up pages not given back to the kernel", "err", err)
			return
		}
		logger.V(2).Info("Gave start-up pages back to the kernel", "advisedMiB", n>>20)
	}()
	logger.Info("Starting", "version", version, "driver", o.Config.DriverName, "memoryLimitMiB", limit>>20,
		"kubeAPIQPS", opts.kubeAPIQPS, "kubeAPIBurst", opts.kubeAPIBurst, "sharing", cmp.Or(string(o.Config.Sharing), "none"))
	if err := driver.Serve(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error(err, "Plugin stopped")
		klog.Flush()
		return 1
	}
	logger.Info("Stopped")
	klog.Flush()
	return 0
}
