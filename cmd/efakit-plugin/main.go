// Command efakit-plugin is the DRA kubelet plugin that publishes a node's
// EFAs as ResourceSlices and prepares them for pods through CDI. It only
// wires flags to driver.Serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/driver"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	klog.InitFlags(nil)
	var o driver.ServeOptions
	nodeName := flag.String("node-name", os.Getenv("NODE_NAME"), "the node this plugin runs on (env NODE_NAME)")
	driverName := flag.String("driver-name", env("DRIVER_NAME", driver.DefaultDriverName), "DRA driver name (env DRIVER_NAME)")
	groups := flag.String("groups", env("EFA_GROUPS", "none"), "publish EFA group devices: none, exclusive (one device per PCIe root instead of single EFAs) or mixed (both, with shared counters; needs DRAPartitionableDevices) (env EFA_GROUPS)")
	flag.BoolVar(&o.Config.NUMAList, "numa-list", false, "publish resource.kubernetes.io/numaNode in list form (clusters with DRAListTypeAttributes)")
	flag.StringVar(&o.SysfsRoot, "sysfs", env("SYSFS_ROOT", "/sys"), "sysfs to scan: the host's /sys, or a capture file (env SYSFS_ROOT)")
	flag.StringVar(&o.ProcRoot, "proc", "/proc", "procfs, for the kernel's boot ID")
	flag.StringVar(&o.CDIRoot, "cdi-root", env("CDI_ROOT", "/var/run/cdi"), "directory for CDI specs (env CDI_ROOT)")
	flag.StringVar(&o.RegistrarDir, "kubelet-registrar-directory-path", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	flag.StringVar(&o.PluginsDir, "kubelet-plugins-directory-path", kubeletplugin.KubeletPluginsDir, "the kubelet's plugins directory")
	flag.DurationVar(&o.RescanInterval, "rescan-interval", time.Minute, "how often sysfs is scanned for changed devices (SIGHUP scans now)")
	flag.DurationVar(&o.HealthInterval, "health-interval", 10*time.Second, "how often device health is checked and reported to the kubelet")
	flag.StringVar(&o.HTTPAddr, "http-address", env("HTTP_ADDRESS", ":8080"), "address for /healthz, /readyz and /metrics (\"\" for none)")
	flag.BoolVar(&o.AllowDevicePlugin, "allow-with-device-plugin", os.Getenv("ALLOW_EFA_DEVICE_PLUGIN") == "true", "publish even where AWS's EFA device plugin (vpc.amazonaws.com/efa) runs on the node (env ALLOW_EFA_DEVICE_PLUGIN=true)")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; in-cluster configuration when empty")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("efakit-plugin", version)
		return
	}
	o.Config.NodeName, o.Config.DriverName = *nodeName, *driverName
	mode, err := driver.ParseGroupMode(*groups)
	if err != nil {
		fmt.Fprintln(os.Stderr, "efakit-plugin:", err)
		os.Exit(2)
	}
	o.Config.Groups = mode
	o.PodUID = types.UID(os.Getenv("POD_UID"))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := klog.Background().WithValues("node", o.Config.NodeName)
	ctx = klog.NewContext(ctx, logger)

	var cfg *rest.Config
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		logger.Error(err, "kubernetes client configuration")
		os.Exit(1)
	}
	if o.KubeClient, err = kubernetes.NewForConfig(cfg); err != nil {
		logger.Error(err, "kubernetes client")
		os.Exit(1)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
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
	logger.Info("starting", "version", version, "driver", o.Config.DriverName)
	if err := driver.Serve(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error(err, "plugin stopped")
		klog.Flush()
		os.Exit(1)
	}
	logger.Info("stopped")
	klog.Flush()
}
