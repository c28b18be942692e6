package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/test/e2e/harness"
	"github.com/efakit/efakit/topology"
)

// The version matrix: what a kube-apiserver of the oldest supported
// Kubernetes (1.34, test/e2e/k8s134) and of the current one (1.37,
// test/e2e/k8s) does with each field the plugin publishes, and what the
// plugin does about it. Facts from the servers' source (k8s.io/kubernetes
// pkg/features/kube_features.go, pkg/registry/resource/resourceslice/
// strategy.go dropDisabledFields, pkg/apis/resource/validation):
//   - device taints: DRADeviceTaints, alpha and off in 1.34, on from 1.36;
//     dropped where off.
//   - shared counters and counter consumption (--groups=mixed):
//     DRAPartitionableDevices, alpha and off in 1.34, on from 1.36;
//     dropped where off.
//   - list-form attributes (--numa-list): DRAListTypeAttributes, alpha
//     and off by default in 1.36 and 1.37, dropped where off; 1.34 has no
//     such field. Either way the attribute is left without a value, which
//     validation refuses: the slice is not stored.

var (
	cp134Once sync.Once
	cp134     *harness.ControlPlane
	cp134Err  error
)

// compatEnv turns the 1.34 half of the matrix on (make e2e-compat): a
// cold build of 1.34's kube-apiserver would take a cold make test past
// its time limit.
const compatEnv = "EFAKIT_E2E_COMPAT"

// apiServer134 returns the shared Kubernetes 1.34 control plane, started
// on first use; the test is skipped without EFAKIT_E2E_COMPAT=1.
func apiServer134(t *testing.T) *harness.ControlPlane {
	t.Helper()
	if os.Getenv(compatEnv) != "1" {
		t.Skipf("Kubernetes 1.34 runs in make e2e-compat (%s=1)", compatEnv)
	}
	cp134Once.Do(func() { cp134, cp134Err = harness.StartControlPlaneOf("k8s134") })
	require.NoError(t, cp134Err)
	return cp134
}

// matrixServer is a kube-apiserver of the matrix, started in its subtest,
// and the features it keeps.
type matrixServer struct {
	name                    string
	start                   func(t *testing.T) *harness.ControlPlane
	taints, counters, lists bool
	// onlyLists: the server differs from the one before it only in list
	// attributes, so only the slices with --numa-list are sent to it.
	onlyLists bool
}

var matrixServers = []matrixServer{
	{name: "1.34", start: apiServer134}, // skipped outside make e2e-compat
	{name: "1.37", start: harness.APIServer, taints: true, counters: true},
	{name: "1.37+DRAListTypeAttributes", start: apiServerLists, taints: true, counters: true, lists: true, onlyLists: true},
}

// apiServerLists starts a 1.37 control plane with DRAListTypeAttributes,
// stopped with the test.
func apiServerLists(t *testing.T) *harness.ControlPlane {
	t.Helper()
	c, err := harness.StartControlPlane("--feature-gates=DRAListTypeAttributes=true")
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	return c
}

// numaListRefusal reports whether err is the API server refusing a slice
// for its numaNode attribute, as the plugin tells it (driver's
// numaListRefused): invalid, with a cause on that attribute.
func numaListRefusal(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Reason != metav1.StatusReasonInvalid || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if strings.HasSuffix(c.Field, ".attributes["+string(resources.AttrNUMANode)+"]") {
			return true
		}
	}
	return false
}

// TestSlicesAcrossVersions publishes the slices of every fixture, in every
// group mode, with and without --numa-list, healthy and with an unhealthy
// (tainted) EFA, to a real kube-apiserver of 1.34, of 1.37 and of 1.37
// with DRAListTypeAttributes (only the --numa-list slices, the one thing
// that server does otherwise), and checks each outcome: on 1.37 every
// slice passes the API's validation and is stored as is; elsewhere stored
// as is; or
// stored with exactly the fields of a disabled feature dropped, which the
// resourceslice controller's DroppedFieldsError names to the plugin (and
// nothing else lost); or refused for the list-form numaNode, in the way
// the plugin recognises.
func TestSlicesAcrossVersions(t *testing.T) {
	ctx := context.Background()
	paths, err := filepath.Glob("../../testdata/sysfs/*.sysfs")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, srv := range matrixServers {
		t.Run(srv.name, func(t *testing.T) {
			slices := srv.start(t).Client.ResourceV1().ResourceSlices()
			for _, p := range paths {
				fixture := strings.TrimSuffix(filepath.Base(p), ".sysfs")
				root, err := sysfs.Open(p)
				require.NoError(t, err)
				topo, err := topology.Scan(root)
				require.NoError(t, err)
				for _, mode := range []resources.GroupMode{resources.GroupsNone, resources.GroupsExclusive, resources.GroupsMixed} {
					for _, numaList := range []bool{false, true} {
						if srv.onlyLists && !numaList {
							continue
						}
						for _, unhealthy := range []bool{false, true} {
							name := fixture + "/" + harness.ModeFlag(mode)
							if numaList {
								name += "/numa-list"
							}
							if unhealthy {
								name += "/unhealthy"
							}
							cfg := resources.Config{NodeName: "n-" + strings.ReplaceAll(fixture, ".", "-"), Groups: mode, NUMAList: numaList}
							res, err := resources.Build(topo, cfg)
							require.NoError(t, err, name)
							for _, s := range resources.Slices(res, cfg) {
								if unhealthy && len(s.Spec.Devices) > 0 {
									// As the plugin taints an EFA whose port is down.
									s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: cfg.TaintKey(), Value: "port-not-active", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
								}
								got, err := slices.Create(ctx, s, metav1.CreateOptions{})
								if numaList && !srv.lists && hasListAttribute(s) {
									require.Error(t, err, "%s: a server without DRAListTypeAttributes must refuse the list form", name)
									assert.True(t, numaListRefusal(err), "%s: refused, but not in the way the plugin recognises: %v", name, err)
									continue
								}
								require.NoError(t, err, "%s: the API server refused the slice", name)
								require.NoError(t, slices.Delete(ctx, got.Name, metav1.DeleteOptions{}))

								var want []string
								kept := s.DeepCopy()
								if unhealthy && !srv.taints && len(s.Spec.Devices) > 0 {
									want = append(want, "DRADeviceTaints")
									kept.Spec.Devices[0].Taints = nil
								}
								if mode == resources.GroupsMixed && !srv.counters && hasCounters(s) {
									want = append(want, "DRAPartitionableDevices")
									kept.Spec.SharedCounters = nil
									for i := range kept.Spec.Devices {
										kept.Spec.Devices[i].ConsumesCounters = nil
									}
								}
								dropped := &resourceslice.DroppedFieldsError{DesiredSlice: s, ActualSlice: got}
								assert.Equal(t, want, dropped.DisabledFeatures(), "%s: the features the plugin learns are off", name)
								// Nothing else lost: the server set only the taint's time.
								for i := range got.Spec.Devices {
									for j := range got.Spec.Devices[i].Taints {
										got.Spec.Devices[i].Taints[j].TimeAdded = nil
									}
								}
								assert.True(t, apiequality.Semantic.DeepEqual(kept.Spec.Devices, got.Spec.Devices), "%s: devices as stored differ beyond %v", name, want)
								assert.True(t, apiequality.Semantic.DeepEqual(kept.Spec.SharedCounters, got.Spec.SharedCounters), "%s: counters as stored differ beyond %v", name, want)
							}
						}
					}
				}
			}
		})
	}
}

func hasListAttribute(s *resourceapi.ResourceSlice) bool {
	for _, d := range s.Spec.Devices {
		for _, a := range d.Attributes {
			if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
				return true
			}
		}
	}
	return false
}

func hasCounters(s *resourceapi.ResourceSlice) bool {
	if len(s.Spec.SharedCounters) > 0 {
		return true
	}
	for _, d := range s.Spec.Devices {
		if len(d.ConsumesCounters) > 0 {
			return true
		}
	}
	return false
}

// TestPluginOn134 runs the plugin against a real Kubernetes 1.34 API
// server, which keeps neither taints, counters nor list-form attributes:
// an unhealthy EFA is withheld instead of tainted; --numa-list falls back
// to numaNode as a number; mixed mode stops with a clear error and leaves
// no slice behind; --sharing=capacity publishes exclusive EFAs (no
// consumable capacity); the chart's class applies without its extended
// resource; the chart's role on 1.34 grants no claim status, and the
// plugin, refused, says so once and prepares on. Each says so in the
// plugin's log.
func TestPluginOn134(t *testing.T) {
	c := apiServer134(t)

	t.Run("chart, extended resource and claim status", func(t *testing.T) { chartOn134(t, c) })

	t.Run("sharing falls back to exclusive", func(t *testing.T) {
		n := harness.NewE2ENode(t, c, "p5-134-sharing", "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone,
			func(n *harness.E2ENode) { n.Args = []string{"--sharing=capacity", "--shares=4"} })
		waitLog(t, n.Dir, "each EFA is published for one claim at a time")
		harness.Eventually(t, func() bool {
			for _, s := range n.Slices(32) {
				for _, d := range s.Spec.Devices {
					if d.AllowMultipleAllocations != nil || len(d.Capacity) > 0 {
						return false
					}
				}
			}
			return true
		}, 30*time.Second, 200*time.Millisecond, func() string { return "exclusive EFAs published; log:\n" + n.Log() })
		// The admin's token writes claim status: 1.34 keeps it.
		claim := allocateByHand(t, c, "default", "on-134", n.Name, "efa-0000-4f-00-0")
		assert.Len(t, n.Prepare(claim), 1)
		harness.Eventually(t, func() bool {
			got, err := c.Client.ResourceV1().ResourceClaims("default").Get(context.Background(), claim.Name, metav1.GetOptions{})
			return err == nil && len(got.Status.Devices) == 1
		}, 30*time.Second, 200*time.Millisecond, func() string { return "the claim's status.devices on 1.34; log:\n" + n.Log() })
	})

	t.Run("unhealthy EFA withheld", func(t *testing.T) {
		n := harness.NewE2ENode(t, c, "p5-134-port-down", portDownFixture(t), resources.GroupsNone)
		var names []string
		for _, s := range n.Slices(31) {
			for _, d := range s.Spec.Devices {
				names = append(names, d.Name)
				assert.Empty(t, d.Taints)
			}
		}
		assert.NotContains(t, names, "efa-0000-50-00-0", "withheld")
		waitLog(t, n.Dir, "unhealthy EFAs are withheld from the ResourceSlices instead of tainted")
	})

	t.Run("numa-list falls back", func(t *testing.T) {
		numaListFallsBack(t, c, "p5-134-numa-list", true)
	})

	t.Run("mixed mode stops", func(t *testing.T) {
		ctx := context.Background()
		const name = "p5-134-mixed"
		_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
		bin, err := harness.PluginBinary()
		require.NoError(t, err)
		dir := t.TempDir()
		for _, d := range []string{"reg", "plugins", "cdi", "proc/sys/kernel/random"} {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "proc/sys/kernel/random/boot_id"), []byte("8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11\n"), 0o644))
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, bin, "--node-name", name, "--kubeconfig", filepath.Join(c.Dir, "admin.kubeconfig"),
			"--sysfs", "../../testdata/sysfs/p5.48xlarge.sysfs", "--proc", filepath.Join(dir, "proc"), "--cdi-root", filepath.Join(dir, "cdi"),
			"--kubelet-registrar-directory-path", filepath.Join(dir, "reg"), "--kubelet-plugins-directory-path", filepath.Join(dir, "plugins"),
			"--groups", "mixed").CombinedOutput()
		require.NoError(t, cctx.Err(), "the plugin must stop by itself; log:\n%s", out)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "the plugin must exit with an error; log:\n%s", out)
		// klog quotes the error, so its own quotes come escaped.
		assert.Contains(t, string(out), `group mode \"mixed\" needs DRAPartitionableDevices: run with --groups=none or exclusive`)
		assert.Contains(t, string(out), `"Plugin stopped"`)
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.net,spec.nodeName=" + name})
		require.NoError(t, err)
		assert.Empty(t, l.Items, "the slices stored without their counters are withdrawn before the plugin stops")
	})
}

// TestNUMAListOn137: on 1.37 --numa-list publishes the list form where
// DRAListTypeAttributes is on, and falls back to the number where it is
// off (its default).
func TestNUMAListOn137(t *testing.T) {
	t.Run("DRAListTypeAttributes", func(t *testing.T) { numaListFallsBack(t, apiServerLists(t), "p5-137-lists", false) })
	t.Run("default", func(t *testing.T) { numaListFallsBack(t, harness.APIServer(t), "p5-137-numa-list", true) })
}

// numaListFallsBack runs the plugin with --numa-list on the p5 and checks
// the form of numaNode in its slices: a number where the server refuses
// the list form (fallback), the list where it keeps it.
func numaListFallsBack(t *testing.T, c *harness.ControlPlane, name string, fallback bool) {
	n := harness.NewE2ENode(t, c, name, "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone, func(n *harness.E2ENode) { n.Args = []string{"--numa-list"} })
	for _, s := range n.Slices(32) {
		for _, d := range s.Spec.Devices {
			a, ok := d.Attributes[resources.AttrNUMANode]
			require.True(t, ok, "%s has %s", d.Name, resources.AttrNUMANode)
			if fallback {
				assert.NotNil(t, a.IntValue, d.Name)
				assert.Nil(t, a.IntValues, d.Name)
			} else {
				assert.Nil(t, a.IntValue, d.Name)
				assert.Len(t, a.IntValues, 1, d.Name)
			}
		}
	}
	const said = "in list form (--numa-list needs DRAListTypeAttributes): published as a single number instead"
	if fallback {
		waitLog(t, n.Dir, said)
	} else {
		assert.NotContains(t, n.Log(), said)
	}
}

// waitLog waits until the plugin's log in dir holds s.
func waitLog(t *testing.T, dir, s string) {
	t.Helper()
	harness.Eventually(t, func() bool {
		log, _ := os.ReadFile(filepath.Join(dir, "plugin.log"))
		return strings.Contains(string(log), s)
	}, 10*time.Second, 100*time.Millisecond, func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "plugin.log"))
		return fmt.Sprintf("the plugin's log says %q; it says:\n%s", s, log)
	})
}

// allocateByHand makes a claim of one EFA of the driver dra.net on node,
// allocated as the scheduler would (no scheduler runs beside 1.34's API
// server here).
func allocateByHand(t *testing.T, c *harness.ControlPlane, ns, name, node, device string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{resourceapi.Finalizer}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "efa", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: resources.DefaultDeviceClass}}}}}}
	cl, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, cl, metav1.CreateOptions{})
	require.NoError(t, err)
	cl.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "efa", Driver: resources.DefaultDriverName, Pool: node, Device: device}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}
	cl, err = c.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cl, metav1.UpdateOptions{})
	require.NoError(t, err)
	return cl
}

// chartOn134: the chart as helm renders it for 1.34 applies to 1.34's API
// server; the server keeps the single-EFA class without its
// extendedResourceName (DRAExtendedResource is alpha and off there), and
// the role grants no claim status (before 1.36 the grant would reach every
// claim's status). The plugin, run with the chart's token and arguments,
// says at start that pods asking for vpc.amazonaws.com/efa are not served,
// and, refused the claim status, says so once and prepares on.
func chartOn134(t *testing.T, c *harness.ControlPlane) {
	ctx := context.Background()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "efakit"}}, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))
	objs := harness.Render(t, "--kube-version", "1.34.4")
	harness.Apply(t, c.Config, objs)
	dc, err := c.Client.ResourceV1().DeviceClasses().Get(ctx, resources.DefaultDeviceClass, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, dc.Spec.ExtendedResourceName, "1.34 drops the field")
	var args []string
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--extended-resource-name=") || strings.HasPrefix(a, "--device-class-name=") {
					args = append(args, a)
				}
			}
		}
	}
	require.Len(t, args, 2, "the chart tells the plugin its class")
	const name = "p5-134-chart"
	kubeconfig := harness.PluginKubeconfig(t, c, "efakit", name, t.TempDir())
	n := harness.NewE2ENode(t, c, name, "../../testdata/sysfs/p5.48xlarge.sysfs", resources.GroupsNone,
		func(n *harness.E2ENode) { n.Args = append(args, "--kubeconfig="+kubeconfig) })
	n.Slices(32)
	waitLog(t, n.Dir, "DRAExtendedResource is off on the API server")
	for i, dev := range []string{"efa-0000-4f-00-0", "efa-0000-50-00-0"} {
		claim := allocateByHand(t, c, "default", fmt.Sprintf("chart-134-%d", i), name, dev)
		assert.Len(t, n.Prepare(claim), 1, "prepared, whatever the claim status")
	}
	waitLog(t, n.Dir, "Claims' device status not written")
	// Said once, though both claims' writes were refused.
	harness.Eventually(t, func() bool {
		return strings.Contains(metricsText(n), `efakit_plugin_claim_status_writes_total{outcome="forbidden"} 2`)
	}, 30*time.Second, 200*time.Millisecond, func() string { return metricsText(n) })
	log, _ := os.ReadFile(filepath.Join(n.Dir, "plugin.log"))
	assert.Equal(t, 1, strings.Count(string(log), "Claims' device status not written"), "said once")
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "Extended resource not served") || strings.Contains(l, "Claims' device status not written") {
			t.Logf("the plugin on 1.34: %s", l)
		}
	}
}

// metricsText is the plugin's /metrics as it serves them.
func metricsText(n *harness.E2ENode) string {
	resp, err := http.Get(n.HTTP + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
