package doctor_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/api/metadata/install"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/doctor"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/rdmans"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

const (
	p5Capture = "../../testdata/sysfs/p5.48xlarge.sysfs"
	nodeName  = "node-1"
	drv       = resources.DefaultDriverName
)

// clientsetAPI is doctor.API over a clientset (a fake one in these tests).
type clientsetAPI struct{ c kubernetes.Interface }

func fakeAPI(objs ...runtime.Object) doctor.API { return clientsetAPI{fake.NewClientset(objs...)} }

func (a clientsetAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return a.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (a clientsetAPI) ResourceSlices(ctx context.Context, driverName, node string) ([]resourceapi.ResourceSlice, error) {
	l, err := a.c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"spec.driver": driverName, "spec.nodeName": node}.String()})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// withModules adds module/efa (with its version) and module/ib_uverbs to a
// capture, as a live node shows them; the captures hold at most
// module/efa/version.
func withModules(t *testing.T, capture string) *sysfs.MemFS {
	t.Helper()
	root, err := sysfs.OpenCapture(capture)
	require.NoError(t, err)
	mem := root.ReadLinkFS.(*sysfs.MemFS)
	var entries []sysfs.Entry
	for _, e := range mem.Entries() {
		if !strings.HasPrefix(e.Path, "module/") && e.Path != "module" {
			entries = append(entries, e)
		}
	}
	entries = append(entries,
		sysfs.Entry{Path: "module/efa/version", Kind: sysfs.KindFile, Data: []byte("2.13.0g\n")},
		sysfs.Entry{Path: "module/ib_uverbs", Kind: sysfs.KindDir},
	)
	m, err := sysfs.NewMemFS(entries)
	require.NoError(t, err)
	return m
}

// scene is one machine as the doctor sees it: a sysfs root, and a temporary
// directory standing for /dev, /proc, the CDI root, the kubelet's directory
// and the metadata directory.
type scene struct {
	t    *testing.T
	topo *topology.Topology
	efas []*efa.Device // discovery's EFAs, in PCI order
	opts doctor.Options
}

// newScene is a p5.48xlarge (32 EFAs, uverbs0-uverbs31) with its modules
// loaded, the shared RDMA namespace mode, unlimited memlock, an empty
// environment and nothing else: no device node, no API, no directories.
func newScene(t *testing.T, place doctor.Place) *scene {
	t.Helper()
	s := sceneOf(t, p5Capture, place)
	require.Len(t, s.efas, 32)
	return s
}

// sceneOf is newScene on another capture.
func sceneOf(t *testing.T, capture string, place doctor.Place) *scene {
	t.Helper()
	root := withModules(t, capture)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "proc"), 0o755))
	return &scene{t: t, topo: topo, efas: res.EFAs, opts: doctor.Options{
		Sysfs:       root,
		DevDir:      filepath.Join(dir, "dev"),
		ProcDir:     filepath.Join(dir, "proc"),
		CDIRoot:     filepath.Join(dir, "cdi"),
		KubeletDir:  filepath.Join(dir, "kubelet"),
		MetadataDir: filepath.Join(dir, "metadata"),
		DriverName:  drv,
		Place:       place,
		Live:        live.Static{Mode: rdmans.Shared},
		Open:        func(string) error { return nil },
		Memlock:     memlock(unix.RLIM_INFINITY),
		Environ:     []string{},
		Files:       os.DirFS(filepath.Join(dir, "root")),
	}}
}

// ofiNCCL puts aws-ofi-nccl where the EFA installer does, and the
// environment that makes NCCL load it.
func (s *scene) ofiNCCL() {
	s.t.Helper()
	root := s.root()
	dir := filepath.Join(root, "opt/amazon/ofi-nccl/lib")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	require.NoError(s.t, os.WriteFile(filepath.Join(dir, "libnccl-net-ofi.so"), nil, 0o644))
	s.opts.Environ = append(s.opts.Environ, "NCCL_NET_PLUGIN=ofi", "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/usr/local/lib")
}

// root is the scene's file system root (Options.Files), made on first use.
func (s *scene) root() string {
	s.t.Helper()
	dir := filepath.Join(filepath.Dir(s.opts.DevDir), "root")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	return dir
}

func memlock(cur uint64) func() (unix.Rlimit, error) {
	return func() (unix.Rlimit, error) { return unix.Rlimit{Cur: cur, Max: cur}, nil }
}

// names returns the RDMA names of the EFAs with the given indexes.
func (s *scene) names(idx ...int) []string {
	out := make([]string, len(idx))
	for i, n := range idx {
		out[i] = s.efas[n].Name
	}
	return out
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// mknod makes the real character device nodes of the EFAs with the given
// indexes under the scene's /dev, with the numbers sysfs gives.
func (s *scene) mknod(idx ...int) {
	s.t.Helper()
	for _, i := range idx {
		v := s.efas[i].Verbs
		s.mknodAt(v.Name, v.Major, v.Minor)
	}
}

// mknodVerbs makes the node of any uverbs device of sysfs (an mlx5 one
// too) with the number its class directory gives.
func (s *scene) mknodVerbs(name string) {
	s.t.Helper()
	dev, err := fs.ReadFile(s.opts.Sysfs, "class/infiniband_verbs/"+name+"/dev")
	require.NoError(s.t, err)
	major, minor, err := sysattr.ParseDevNumber(strings.TrimSpace(string(dev)))
	require.NoError(s.t, err)
	s.mknodAt(name, major, minor)
}

// procSelf writes a file of the scene's /proc/self: what this process
// reads about its own container.
func (s *scene) procSelf(name, content string) {
	s.t.Helper()
	dir := filepath.Join(s.opts.ProcDir, "self")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	require.NoError(s.t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
}

// mknodAt makes /dev/infiniband/<name> as the character device major:minor.
func (s *scene) mknodAt(name string, major, minor uint32) {
	s.t.Helper()
	dir := filepath.Join(s.opts.DevDir, "infiniband")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor)))
	if errors.Is(err, unix.EPERM) {
		s.t.Skipf("mknod of a character device needs CAP_MKNOD (run the tests as root): %v", err)
	}
	require.NoError(s.t, err)
}

// socket makes a unix socket file at path, as a gRPC server leaves one.
func (s *scene) socket(path string) {
	s.t.Helper()
	require.NoError(s.t, os.MkdirAll(filepath.Dir(path), 0o755))
	err := unix.Mknod(path, unix.S_IFSOCK|0o600, 0)
	if errors.Is(err, unix.EPERM) {
		s.t.Skipf("mknod of a socket refused: %v", err)
	}
	require.NoError(s.t, err)
}

// publishedEFA is an EFA's device as efakit's plugin publishes it, whose
// attributes the device metadata carries.
func (s *scene) publishedEFA(i int) resourceapi.Device {
	s.t.Helper()
	d := s.topo.ByName(s.efas[i].Name)
	require.NotNil(s.t, d)
	dev, err := resources.EFADevice(s.topo, d, resources.Config{NodeName: nodeName})
	require.NoError(s.t, err)
	return dev
}

// metadataFile writes the device metadata of one request of a claim made
// from a template, as the kubelet plugin helper writes it (the codec of
// k8s.io/dynamic-resource-allocation, metadata.resource.k8s.io/v1beta1 as
// efakit's plugin configures it) and as the kubelet mounts it into the
// container.
func (s *scene) metadataFile(podClaim, request string, devices ...metadata.Device) {
	s.t.Helper()
	dm := &metadata.DeviceMetadata{
		ObjectMeta:   metav1.ObjectMeta{Name: "pod-" + podClaim + "-x7k2q", Namespace: "default", UID: types.UID("uid-" + podClaim), Generation: 1},
		PodClaimName: &podClaim,
		Requests:     []metadata.DeviceMetadataRequest{{Name: request, Devices: devices}},
	}
	scheme := install.NewScheme()
	codecs := runtimeserializer.NewCodecFactory(scheme)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	require.True(s.t, ok)
	data, err := runtime.Encode(codecs.EncoderForVersion(info.PrettySerializer, metadatav1beta1.SchemeGroupVersion), dm)
	require.NoError(s.t, err)
	path := filepath.Join(s.opts.MetadataDir, metadata.ResourceClaimTemplatesSubDir, podClaim, request, metadata.MetadataFileName(drv))
	require.NoError(s.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(s.t, os.WriteFile(path, append(data, '\n'), 0o644))
}

// efaMetadata is the metadata of the EFAs with the given indexes, with the
// published attributes.
func (s *scene) efaMetadata(idx ...int) []metadata.Device {
	var out []metadata.Device
	for _, i := range idx {
		pub := s.publishedEFA(i)
		out = append(out, metadata.Device{Driver: drv, Pool: nodeName, Name: pub.Name, Attributes: pub.Attributes})
	}
	return out
}

// efakitSlices are the slices efakit's plugin publishes for the scene.
func (s *scene) efakitSlices() []*resourceapi.ResourceSlice {
	s.t.Helper()
	cfg := resources.Config{NodeName: nodeName}
	pool, err := resources.Build(s.topo, cfg)
	require.NoError(s.t, err)
	out := resources.Slices(pool, cfg)
	for i, sl := range out {
		sl.Name = fmt.Sprintf("%s%d", sl.GenerateName, i)
	}
	return out
}

func (s *scene) run() *doctor.Report {
	s.t.Helper()
	rep, err := doctor.Run(context.Background(), s.opts)
	require.NoError(s.t, err)
	require.Len(s.t, rep.Checks, 15)
	return rep
}

func check(t *testing.T, rep *doctor.Report, id doctor.CheckID) doctor.Check {
	t.Helper()
	c, ok := rep.Check(id)
	require.True(t, ok, "no check %s", id)
	return c
}

// assertStatuses compares every check's status, saying the message of each
// that differs.
func assertStatuses(t *testing.T, rep *doctor.Report, want map[doctor.CheckID]doctor.Status) {
	t.Helper()
	for _, c := range rep.Checks {
		w, ok := want[c.ID]
		if !ok {
			w = doctor.Pass
		}
		assert.Equal(t, w, c.Status, "%s: %s | fix: %s", c.ID, c.Message, c.Fix)
		if c.Status == doctor.Pass || c.Status == doctor.Skip {
			assert.Empty(t, c.Fix, c.ID)
		} else {
			assert.NotEmpty(t, c.Fix, c.ID)
		}
		assert.NotEmpty(t, c.Message, c.ID)
	}
}

// healthyNode is a node where everything works: every uverbs node, the API
// with efakit's slices, efakit's registration, a CDI directory with a
// prepared claim's specs, containerd with unlimited memlock.
func healthyNode(t *testing.T) *scene {
	s := newScene(t, doctor.OnNode)
	s.mknod(span(0, 32)...)
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"node.kubernetes.io/instance-type": "p5.48xlarge"}}}}
	for _, sl := range s.efakitSlices() {
		objs = append(objs, sl)
	}
	s.opts.Client = fakeAPI(objs...)
	s.opts.NodeName = nodeName
	s.socket(filepath.Join(s.opts.KubeletDir, "plugins_registry", drv+"-reg.sock"))
	s.socket(filepath.Join(s.opts.KubeletDir, "device-plugins", "kubelet.sock"))
	// A prepared claim: efakit's spec as its cdi.Writer writes it, and the
	// kubelet plugin helper's metadata spec.
	w, err := cdi.NewWriter(s.opts.CDIRoot, drv)
	require.NoError(t, err)
	v := s.efas[0].Verbs
	_, err = w.Write("1b4e28ba-2fa1-11d2-883f-0016d3cca427", map[string]cdi.Request{"efas": {Devices: []cdi.Device{{Name: s.efas[0].Name, Uverbs: v.Name, Major: v.Major, Minor: v.Minor}}}})
	require.NoError(t, err)
	writeJSON(t, filepath.Join(s.opts.CDIRoot, drv+"_metadata_1b4e28ba-2fa1-11d2-883f-0016d3cca427_efas.json"), &specs.Spec{
		Version: "0.5.0",
		Kind:    drv + "/metadata",
		Devices: []specs.Device{{Name: "1b4e28ba-2fa1-11d2-883f-0016d3cca427_efas", ContainerEdits: specs.ContainerEdits{Mounts: []*specs.Mount{{
			HostPath:      "/var/lib/kubelet/plugins/dra.net/dra-device-metadata/default_c/efas/metadata.json",
			ContainerPath: metadata.ResourceClaimFilePath(drv, "c", "efas"),
			Options:       []string{"ro", "bind"},
		}}}}},
	})
	proc := filepath.Join(s.opts.ProcDir, "812")
	require.NoError(t, os.MkdirAll(proc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "comm"), []byte("containerd\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "limits"), []byte(limitsFile("unlimited", "unlimited")), 0o644))
	return s
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// limitsFile is a /proc/<pid>/limits with the given memlock limits.
func limitsFile(soft, hard string) string {
	return "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max cpu time              unlimited            unlimited            seconds   \n" +
		"Max open files            1048576              1048576              files     \n" +
		fmt.Sprintf("Max locked memory         %-20s %-20s bytes     \n", soft, hard) +
		"Max address space         unlimited            unlimited            bytes     \n"
}

func TestHealthyNode(t *testing.T) {
	t.Parallel()
	s := healthyNode(t)
	var opened []string
	s.opts.Open = func(p string) error { opened = append(opened, p); return nil }
	rep := s.run()
	assert.Equal(t, doctor.OnNode, rep.Place)
	assert.False(t, rep.Failed())
	assertStatuses(t, rep, map[doctor.CheckID]doctor.Status{
		doctor.CheckEnvironment:      doctor.Skip,
		doctor.CheckFallback:         doctor.Skip,
		doctor.CheckDeviceMetadata:   doctor.Skip,
		doctor.CheckUnclaimedDevices: doctor.Skip,
	})
	assert.Len(t, opened, 32, "every node is opened once")
	assert.Equal(t, "loaded: efa 2.13.0g, ib_uverbs", check(t, rep, doctor.CheckKernelModules).Message)
	assert.Contains(t, check(t, rep, doctor.CheckEFADevices).Message, "32 EFAs (efa1) with a uverbs device: rdmap79s0 (uverbs0)")
	assert.Equal(t, "32 of 32 RDMA devices openable: uverbs0-uverbs31 (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0 and 28 more)", check(t, rep, doctor.CheckUverbsNodes).Message)
	assert.Equal(t, "all 32 RDMA devices visible in sysfs can be opened here", check(t, rep, doctor.CheckLibfabricVisibility).Message)
	assert.Equal(t, "the kernel's RDMA namespace mode is shared", check(t, rep, doctor.CheckRDMANetns).Message)
	assert.Contains(t, check(t, rep, doctor.CheckMemlock).Message, "containerd (pid 812), which containers inherit: unlimited")
	assert.Contains(t, check(t, rep, doctor.CheckDevicePlugin).Message, "node node-1 has no vpc.amazonaws.com/efa capacity")
	assert.Contains(t, check(t, rep, doctor.CheckDRADriver).Message, "1 ResourceSlice of dra.net on node node-1, all efakit's")
	assert.Contains(t, check(t, rep, doctor.CheckDRADriver).Message, "one dra.net registration")
	assert.Contains(t, check(t, rep, doctor.CheckCDI).Message, "2 spec files in")
	assert.Contains(t, check(t, rep, doctor.CheckCDI).Message, "(1 dra.net-efa_*.json, 1 dra.net_metadata_*.json), all load")
}

// TestPodHoldingFourEFAs: a pod given the four EFAs of one GPU of a p5.
// libfabric sees all 32 through RDMA netlink and can open 4.
func TestPodHoldingFourEFAs(t *testing.T) {
	t.Parallel()
	s := newScene(t, doctor.InPod)
	s.mknod(0, 1, 2, 3)
	s.metadataFile("efas", "efas", s.efaMetadata(0, 1, 2, 3)...)
	s.ofiNCCL()
	rep := s.run()
	assert.Equal(t, doctor.InPod, rep.Place)
	assert.False(t, rep.Failed())
	assertStatuses(t, rep, map[doctor.CheckID]doctor.Status{
		doctor.CheckLibfabricVisibility: doctor.Warn,
		doctor.CheckFallback:            doctor.Warn,
		doctor.CheckDevicePlugin:        doctor.Skip,
		doctor.CheckDRADriver:           doctor.Skip,
		doctor.CheckCDI:                 doctor.Skip,
	})
	assert.Equal(t, "4 of 32 RDMA devices openable: uverbs0-uverbs3 (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0); 28 not in "+s.opts.DevDir+"/infiniband: uverbs4-uverbs31 (not given to this container)",
		check(t, rep, doctor.CheckUverbsNodes).Message)
	vis := check(t, rep, doctor.CheckLibfabricVisibility)
	assert.Equal(t, "28 RDMA devices visible in sysfs cannot be opened here (4 can): libfabric without PR 12744 fails fi_getinfo with -61", vis.Message)
	assert.Contains(t, vis.Fix, "use a libfabric that includes PR 12744 (August 2026), or give the container every RDMA device of the node")
	assert.Equal(t, "no FI_EFA_IFACE: libfabric uses every EFA it can open", check(t, rep, doctor.CheckEnvironment).Message)
	assert.Equal(t, "1 dra.net metadata file name 4 EFAs (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0), each openable here",
		check(t, rep, doctor.CheckDeviceMetadata).Message)
	assert.Equal(t, "this container can open only EFAs its dra.net claims gave it: uverbs0-uverbs3 (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0)",
		check(t, rep, doctor.CheckUnclaimedDevices).Message)
	assert.Contains(t, check(t, rep, doctor.CheckDevicePlugin).Message, "API not consulted")
	assert.Contains(t, check(t, rep, doctor.CheckCDI).Message, "in a pod")
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		environ func(s *scene) []string
		// privileged: the container can open all 32 EFAs, its claim gave
		// it the first 8.
		privileged bool
		want       doctor.Status
		message    []string
	}{
		{name: "unset", environ: func(*scene) []string { return nil }, want: doctor.Pass,
			message: []string{"no FI_EFA_IFACE: libfabric uses every EFA it can open"}},
		{name: "subset", environ: func(s *scene) []string {
			return []string{cdi.EnvIface + "=" + strings.Join(s.names(0, 1, 2, 3), ",")}
		}, want: doctor.Fail, message: []string{
			"FI_EFA_IFACE names 4 of the 8 EFAs this container holds: libfabric uses only rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0, not rdmap96s0, rdmap97s0, rdmap98s0, rdmap99s0",
		}},
		{name: "exact", environ: func(s *scene) []string {
			return []string{cdi.EnvIface + "=" + strings.Join(s.names(span(0, 8)...), ","), cdi.EnvProvider + "=efa"}
		}, want: doctor.Pass, message: []string{"FI_EFA_IFACE lists exactly the 8 EFAs this container holds", "FI_PROVIDER=efa"}},
		{name: "all", environ: func(*scene) []string { return []string{cdi.EnvIface + "=all"} }, want: doctor.Pass,
			message: []string{"FI_EFA_IFACE=all"}},
		{name: "names one not held", environ: func(s *scene) []string {
			return []string{cdi.EnvIface + "=" + strings.Join(s.names(span(0, 9)...), ",")}
		}, want: doctor.Warn, message: []string{"FI_EFA_IFACE names rdmap113s0, which this container cannot open"}},
		{name: "other provider", environ: func(*scene) []string { return []string{cdi.EnvProvider + "=tcp"} }, want: doctor.Warn,
			message: []string{"FI_PROVIDER=tcp: libfabric will not use EFA"}},
		{name: "efa excluded", environ: func(*scene) []string { return []string{cdi.EnvProvider + "=^efa"} }, want: doctor.Warn},
		{name: "efa among others", environ: func(*scene) []string { return []string{cdi.EnvProvider + "=shm,efa"} }, want: doctor.Pass},
		{name: "efakit env libfabric in a privileged container", privileged: true, environ: func(s *scene) []string {
			return []string{cdi.EnvProvider + "=efa", cdi.EnvIface + "=" + strings.Join(s.names(span(0, 8)...), ",")}
		}, want: doctor.Pass, message: []string{"FI_EFA_IFACE names exactly the 8 EFAs of this pod's dra.net claims (efakit's env: libfabric); this container can open 24 more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScene(t, doctor.InPod)
			if tc.privileged {
				s.mknod(span(0, 32)...)
			} else {
				s.mknod(span(0, 8)...)
			}
			s.metadataFile("efas", "efas", s.efaMetadata(span(0, 8)...)...)
			s.opts.Environ = append([]string{"KUBERNETES_SERVICE_HOST=10.0.0.1"}, tc.environ(s)...)
			c := check(t, s.run(), doctor.CheckEnvironment)
			assert.Equal(t, tc.want, c.Status, c.Message)
			for _, m := range tc.message {
				assert.Contains(t, c.Message, m)
			}
			if tc.want == doctor.Fail {
				assert.Contains(t, c.Fix, "unset FI_EFA_IFACE")
				assert.Contains(t, c.Fix, "list all 8")
			}
		})
	}
}

func TestDeviceMetadata(t *testing.T) {
	t.Parallel()
	t.Run("names an EFA whose node is absent", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1, 2, 3)
		s.metadataFile("efas", "efas", s.efaMetadata(0, 1, 2, 3, 4)...)
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "the metadata names EFAs this container cannot open: rdmap96s0 ("+filepath.Join(s.opts.DevDir, "infiniband", "uverbs4")+": absent, in resourceclaimtemplates/efas/efas/dra.net-metadata.json)")
		assert.Contains(t, c.Fix, "CDI")
	})
	t.Run("an openable EFA no file names is unclaimed-devices'", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1, 2, 3)
		s.metadataFile("efas", "efas", s.efaMetadata(0, 1, 2)...)
		rep := s.run()
		c := check(t, rep, doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Pass, c.Status, c.Message)
		assert.Equal(t, "1 dra.net metadata file name 3 EFAs (rdmap79s0, rdmap80s0, rdmap81s0), each openable here", c.Message)
		u := check(t, rep, doctor.CheckUnclaimedDevices)
		assert.Equal(t, doctor.Warn, u.Status)
		assert.Contains(t, u.Message, "this container can open 1 EFA its dra.net claims did not give it: uverbs3 (rdmap82s0), beside the 3 they gave (uverbs0-uverbs2)")
	})
	t.Run("a group by members, qualified keys, two files", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1, 2, 3, 4)
		members := strings.Join(s.names(0, 1, 2, 3), ",")
		s.metadataFile("group", "efas", metadata.Device{Driver: drv, Pool: nodeName, Name: "efa-group-pci0000-44", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resourceapi.QualifiedName(drv + "/" + string(resources.AttrMembers)): {StringValue: &members},
		}})
		rdma, uverbs := s.efas[4].Name, s.efas[4].Verbs.Name
		s.metadataFile("single", "efa", metadata.Device{Driver: drv, Pool: nodeName, Name: "efa-x", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resourceapi.QualifiedName(drv + "/" + string(resources.AttrRDMADev)): {StringValue: &rdma},
			resourceapi.QualifiedName(drv + "/" + string(resources.AttrUverbs)):  {StringValue: &uverbs},
		}})
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Pass, c.Status, c.Message)
		assert.Contains(t, c.Message, "2 dra.net metadata files name 5 EFAs")
	})
	t.Run("uverbs renumbered since prepare", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0)
		rdma, stale := s.efas[0].Name, "uverbs7"
		s.metadataFile("efa", "efa", metadata.Device{Driver: drv, Pool: nodeName, Name: "efa-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resources.AttrRDMADev: {StringValue: &rdma}, resources.AttrUverbs: {StringValue: &stale},
		}})
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "rdmap79s0 is uverbs7 in the metadata, uverbs0 in sysfs")
	})
	t.Run("a file that does not decode", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0)
		path := filepath.Join(s.opts.MetadataDir, metadata.ResourceClaimsSubDir, "c", "efa", metadata.MetadataFileName(drv))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(`{"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata", "requests": 3}`), 0o644))
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, path)
	})
	t.Run("no metadata directory", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Skip, c.Status)
		assert.Contains(t, c.Message, "not in a pod with efakit's claims")
	})
}

// The fixes TestUnclaimedDevices expects, as a user reads them.
const (
	wantFixMOFED = "NVIDIA's device plugin in MOFED mode: turn the mode off, Helm value mofedEnabled=false of its nvidia-device-plugin chart " +
		"(flag --mofed-enabled=false, environment MOFED_ENABLED=false; on by default in k8s-device-plugin v0.19.0 to v0.19.2, off from v0.19.3), then recreate the pod"
	wantFixHostPath   = "a hostPath volume of /dev/infiniband (or /dev): remove it from the pod, and claim EFAs of efakit's DeviceClass instead"
	wantFixPrivileged = "a privileged container: it sees every device node of the node, so drop privileged: true, or accept it and set env: libfabric " +
		"in efakit's opaque configuration of the claim, so that FI_EFA_IFACE names the claimed EFAs for libfabric"
	// The bounding sets of a privileged container and of the runtime's
	// default capabilities (no CAP_SYS_ADMIN).
	capPrivileged = "Name:\tefakit\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"
	capDefault    = "Name:\tefakit\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n"
)

// TestUnclaimedDevices: in a pod, the EFA uverbs nodes the container can
// open beyond those its dra.net metadata names, and where they come from.
func TestUnclaimedDevices(t *testing.T) {
	t.Parallel()
	all := span(0, 32)
	// Every uverbs node of the node but two claimed: uverbs2-uverbs31.
	const everyButTwo = "this container can open 30 EFAs its dra.net claims did not give it: uverbs2-uverbs31 " +
		"(rdmap81s0, rdmap82s0, rdmap96s0, rdmap97s0, rdmap98s0, rdmap99s0, rdmap113s0, rdmap114s0 and 22 more), beside the 2 they gave (uverbs0-uverbs1)"
	for _, tc := range []struct {
		name    string
		capture string // p5 when empty
		place   doctor.Place
		nodes   []int    // the EFAs whose node the container holds
		others  []string // non-EFA uverbs nodes it holds
		claimed []int    // the EFAs its metadata names; nil for no metadata file
		// metadataDir makes the metadata directory without a dra.net file.
		metadataDir bool
		devName     string // the name of the scene's /dev, when not dev
		broken      bool   // adds a dra.net metadata file that does not decode
		environ     func(s *scene) []string
		mountinfo   func(dev string) string // /proc/self/mountinfo
		status      string                  // /proc/self/status
		want        doctor.Status
		message     func(s *scene) string // the whole message
		contains    []string
		fix         string // the whole fix
	}{
		{name: "claimed EFAs only", nodes: span(0, 4), claimed: span(0, 4), status: capDefault, want: doctor.Pass,
			message: func(*scene) string {
				return "this container can open only EFAs its dra.net claims gave it: uverbs0-uverbs3 (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0)"
			}},
		{name: "every node, two claimed, no source shows", nodes: all, claimed: span(0, 2), status: capDefault, want: doctor.Warn,
			message: func(*scene) string {
				return everyButTwo + "; none of the usual sources shows here (NVIDIA's device plugin in MOFED mode, a hostPath volume of /dev/infiniband, a privileged container)"
			},
			fix: wantFixMOFED + "; " + wantFixHostPath + "; " + wantFixPrivileged},
		{name: "every node, two claimed, NVIDIA's MOFED mode", nodes: all, claimed: span(0, 2), want: doctor.Warn,
			environ: func(*scene) []string { return []string{"NVIDIA_VISIBLE_DEVICES=GPU-1", "NVIDIA_MOFED=enabled"} },
			message: func(*scene) string {
				return everyButTwo + "; NVIDIA_MOFED=enabled in this container's environment (NVIDIA's device plugin in MOFED mode)"
			},
			fix: wantFixMOFED},
		{name: "every node, two claimed, a hostPath of /dev/infiniband", nodes: all, claimed: span(0, 2), want: doctor.Warn,
			mountinfo: func(dev string) string {
				return "1391 1390 0:118 / / rw,relatime - overlay overlay rw\n" +
					"1392 1391 0:120 / " + dev + " rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n" +
					"1400 1392 0:5 /infiniband " + dev + "/infiniband rw,nosuid,relatime master:2 - devtmpfs devtmpfs rw,size=4096k,mode=755\n"
			},
			message: func(s *scene) string {
				return everyButTwo + "; " + s.opts.DevDir + "/infiniband is a mount of devtmpfs /infiniband (a hostPath volume)"
			},
			fix: wantFixHostPath},
		// The kernel writes a space in a path as \040.
		{name: "every node, two claimed, a hostPath of /dev", nodes: all, claimed: span(0, 2), devName: "host dev", want: doctor.Warn,
			mountinfo: func(dev string) string {
				return "1392 1391 0:5 / " + strings.ReplaceAll(dev, " ", `\040`) + " rw,nosuid,relatime master:2 - devtmpfs devtmpfs rw,size=4096k,mode=755\n"
			},
			message: func(s *scene) string {
				return everyButTwo + "; " + s.opts.DevDir + " is a mount of devtmpfs / (a hostPath volume)"
			},
			fix: wantFixHostPath},
		{name: "every node, two claimed, privileged", nodes: all, claimed: span(0, 2), status: capPrivileged, want: doctor.Warn,
			message: func(*scene) string {
				return everyButTwo + "; CAP_SYS_ADMIN in this container's capability bounding set (a privileged container, likely)"
			},
			fix: wantFixPrivileged},
		{name: "privileged with efakit's env: libfabric", nodes: all, claimed: span(0, 2), status: capPrivileged, want: doctor.Pass,
			environ: func(s *scene) []string {
				return []string{"FI_PROVIDER=efa", "FI_EFA_IFACE=" + strings.Join(s.names(0, 1), ",")}
			},
			message: func(*scene) string {
				return everyButTwo + "; FI_EFA_IFACE names exactly the claimed EFAs (efakit's env: libfabric), so libfabric uses no other" +
					"; CAP_SYS_ADMIN in this container's capability bounding set (a privileged container, likely)"
			}},
		{name: "MOFED mode with efakit's env: libfabric still warns", nodes: all, claimed: span(0, 2), want: doctor.Warn,
			environ: func(s *scene) []string {
				return []string{"NVIDIA_MOFED=enabled", "FI_EFA_IFACE=" + strings.Join(s.names(0, 1), ",")}
			},
			contains: []string{"FI_EFA_IFACE names exactly the claimed EFAs", "NVIDIA_MOFED=enabled"},
			fix:      wantFixMOFED},
		// In a user namespace the runtime bind-mounts each device node:
		// mounts of nodes, not of the directory, and no hostPath.
		{name: "bind-mounted nodes are no hostPath", nodes: span(0, 4), claimed: span(0, 2), status: capDefault, want: doctor.Warn,
			mountinfo: func(dev string) string {
				out := "1392 1391 0:120 / " + dev + " rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n"
				for i := range 4 {
					out += fmt.Sprintf("%d 1392 0:5 /infiniband/uverbs%d %s/infiniband/uverbs%d rw,nosuid - devtmpfs devtmpfs rw\n", 1401+i, i, dev, i)
				}
				return out
			},
			message: func(*scene) string {
				return "this container can open 2 EFAs its dra.net claims did not give it: uverbs2-uverbs3 (rdmap81s0, rdmap82s0), beside the 2 they gave (uverbs0-uverbs1)" +
					"; none of the usual sources shows here (NVIDIA's device plugin in MOFED mode, a hostPath volume of /dev/infiniband, a privileged container)"
			},
			fix: wantFixMOFED + "; " + wantFixHostPath + "; " + wantFixPrivileged},
		{name: "nodes but no metadata directory", nodes: all, status: capPrivileged, want: doctor.Skip,
			message: func(s *scene) string {
				return "this container can open 32 EFAs (uverbs0-uverbs31), and no " + s.opts.MetadataDir +
					" says which its claims gave (no dra.net claim, or the kubelet mounts no device metadata): not judged"
			}},
		{name: "nodes, a metadata directory, no dra.net file", nodes: span(0, 4), metadataDir: true, want: doctor.Skip,
			message: func(s *scene) string {
				return "this container can open 4 EFAs (uverbs0-uverbs3), and no dra.net metadata file under " + s.opts.MetadataDir +
					" says which its claims gave (no dra.net claim, or the kubelet mounts no device metadata): not judged"
			}},
		{name: "nodes, no metadata, NVIDIA's MOFED mode", nodes: all, want: doctor.Warn,
			environ: func(*scene) []string { return []string{"NVIDIA_MOFED=enabled"} },
			message: func(s *scene) string {
				return "this container can open 32 EFAs (uverbs0-uverbs31), and no " + s.opts.MetadataDir +
					" says which its claims gave (no dra.net claim, or the kubelet mounts no device metadata)" +
					"; NVIDIA_MOFED=enabled in this container's environment (NVIDIA's device plugin in MOFED mode), which gives every uverbs node of the node"
			},
			fix: wantFixMOFED},
		{name: "metadata that does not decode", nodes: all, claimed: span(0, 2), broken: true, environ: func(*scene) []string { return []string{"NVIDIA_MOFED=enabled"} }, want: doctor.Skip,
			message: func(*scene) string {
				return "this container can open 32 EFAs (uverbs0-uverbs31), but which its claims gave is not known: " +
					"dra.net metadata that could not be read or names no EFA (device-metadata says which)"
			}},
		{name: "no EFA node", claimed: span(0, 2), want: doctor.Pass,
			message: func(*scene) string { return "this container can open no EFA's uverbs node" }},
		{name: "on the node", place: doctor.OnNode, nodes: all, environ: func(*scene) []string { return []string{"NVIDIA_MOFED=enabled"} }, want: doctor.Skip,
			message: func(*scene) string {
				return "on a node: only a container holds EFAs it did not claim (run efakit doctor in the pod)"
			}},
		// p6-b200: EFAs uverbs0-uverbs5 and uverbs8-uverbs9, mlx5 uverbs6-uverbs7.
		{name: "p6-b200 mlx5 nodes beside the claimed EFAs", capture: "../../testdata/sysfs/p6-b200.48xlarge.sysfs",
			nodes: span(0, 8), others: []string{"uverbs6", "uverbs7"}, claimed: span(0, 8), want: doctor.Pass,
			message: func(*scene) string {
				return "this container can open only EFAs its dra.net claims gave it: uverbs0-uverbs5, uverbs8-uverbs9 " +
					"(rdmap79s0, rdmap80s0, rdmap96s0, rdmap97s0, rdmap113s0, rdmap114s0, rdmap132s0, rdmap133s0)" +
					"; 2 other uverbs nodes openable too, not judged: uverbs6-uverbs7 (ibp115s0f0, ibp116s0f0) are no EFAs, and efakit gives only EFAs"
			}},
		{name: "p6-b200 every node, one GPU's EFAs claimed", capture: "../../testdata/sysfs/p6-b200.48xlarge.sysfs",
			nodes: span(0, 8), others: []string{"uverbs6", "uverbs7"}, claimed: []int{0}, want: doctor.Warn,
			environ: func(*scene) []string { return []string{"NVIDIA_MOFED=enabled"} },
			message: func(*scene) string {
				return "this container can open 7 EFAs its dra.net claims did not give it: uverbs1-uverbs5, uverbs8-uverbs9 " +
					"(rdmap80s0, rdmap96s0, rdmap97s0, rdmap113s0, rdmap114s0, rdmap132s0, rdmap133s0), beside the 1 they gave (uverbs0)" +
					"; NVIDIA_MOFED=enabled in this container's environment (NVIDIA's device plugin in MOFED mode)" +
					"; 2 other uverbs nodes openable too, not judged: uverbs6-uverbs7 (ibp115s0f0, ibp116s0f0) are no EFAs, and efakit gives only EFAs"
			},
			fix: wantFixMOFED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			place := tc.place
			if place == "" {
				place = doctor.InPod
			}
			capture := tc.capture
			if capture == "" {
				capture = p5Capture
			}
			s := sceneOf(t, capture, place)
			if tc.devName != "" {
				s.opts.DevDir = filepath.Join(filepath.Dir(s.opts.DevDir), tc.devName)
			}
			s.mknod(tc.nodes...)
			for _, name := range tc.others {
				s.mknodVerbs(name)
			}
			if tc.claimed != nil {
				s.metadataFile("efas", "efas", s.efaMetadata(tc.claimed...)...)
			}
			if tc.metadataDir {
				require.NoError(t, os.MkdirAll(s.opts.MetadataDir, 0o755))
			}
			if tc.broken {
				path := filepath.Join(s.opts.MetadataDir, metadata.ResourceClaimsSubDir, "c", "efa", metadata.MetadataFileName(drv))
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(`{"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata", "requests": 3}`), 0o644))
			}
			if tc.environ != nil {
				s.opts.Environ = tc.environ(s)
			}
			if tc.mountinfo != nil {
				s.procSelf("mountinfo", tc.mountinfo(s.opts.DevDir))
			}
			if tc.status != "" {
				s.procSelf("status", tc.status)
			}
			rep := s.run()
			c := check(t, rep, doctor.CheckUnclaimedDevices)
			assert.Equal(t, tc.want, c.Status, "%s | fix: %s", c.Message, c.Fix)
			if tc.message != nil {
				assert.Equal(t, tc.message(s), c.Message)
			}
			for _, m := range tc.contains {
				assert.Contains(t, c.Message, m)
			}
			assert.Equal(t, tc.fix, c.Fix)
			assert.NotContains(t, c.Message, "\n")
			// The metadata's own check no longer judges EFAs beyond the
			// claims: one finding, one check.
			if tc.claimed != nil && len(tc.nodes) > 0 && !tc.broken {
				assert.Equal(t, doctor.Pass, check(t, rep, doctor.CheckDeviceMetadata).Status, check(t, rep, doctor.CheckDeviceMetadata).Message)
			}
		})
	}
}

func TestUverbsNodes(t *testing.T) {
	t.Parallel()
	t.Run("a node of the wrong number", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1)
		s.mknodAt("uverbs2", 231, 250)
		c := check(t, s.run(), doctor.CheckUverbsNodes)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, filepath.Join(s.opts.DevDir, "infiniband", "uverbs2")+" (rdmap81s0) is 231:250, sysfs says 231:194")
	})
	t.Run("a regular file", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0)
		require.NoError(t, os.WriteFile(filepath.Join(s.opts.DevDir, "infiniband", "uverbs1"), nil, 0o644))
		c := check(t, s.run(), doctor.CheckUverbsNodes)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "uverbs1 (rdmap80s0) is a regular file")
	})
	t.Run("open refused", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1)
		s.opts.Open = func(p string) error {
			if strings.HasSuffix(p, "uverbs1") {
				return &fs.PathError{Op: "open", Path: p, Err: unix.EPERM}
			}
			return nil
		}
		rep := s.run()
		c := check(t, rep, doctor.CheckUverbsNodes)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "operation not permitted")
		assert.Contains(t, c.Message, "1 of 32 RDMA devices openable: uverbs0 (rdmap79s0)")
		assert.Equal(t, "31 RDMA devices visible in sysfs cannot be opened here (1 can): libfabric without PR 12744 fails fi_getinfo with -61",
			check(t, rep, doctor.CheckLibfabricVisibility).Message)
	})
	t.Run("none in a pod", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		rep := s.run()
		assert.Equal(t, doctor.Fail, check(t, rep, doctor.CheckUverbsNodes).Status)
		assert.Equal(t, doctor.Fail, check(t, rep, doctor.CheckLibfabricVisibility).Status)
		assert.True(t, rep.Failed())
	})
	t.Run("absent on a node", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		s.mknod(span(0, 31)...)
		c := check(t, s.run(), doctor.CheckUverbsNodes)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "1 not in "+s.opts.DevDir+"/infiniband: uverbs31")
		assert.Contains(t, c.Fix, "pass --dev")
	})
}

// TestOtherRDMADevices: p6-b200's mlx5 devices count among the RDMA devices
// libfabric sees, though they are no EFAs.
func TestOtherRDMADevices(t *testing.T) {
	t.Parallel()
	root := withModules(t, "../../testdata/sysfs/p6-b200.48xlarge.sysfs")
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	dir := t.TempDir()
	s := &scene{t: t, efas: res.EFAs, opts: doctor.Options{
		Sysfs: root, DevDir: filepath.Join(dir, "dev"), ProcDir: dir, CDIRoot: dir, KubeletDir: dir, MetadataDir: filepath.Join(dir, "metadata"),
		Place: doctor.InPod, Live: live.Static{Mode: rdmans.Shared}, Open: func(string) error { return nil }, Memlock: memlock(unix.RLIM_INFINITY), Environ: []string{},
	}}
	s.mknod(span(0, len(res.EFAs))...)
	rep := s.run()
	vis := check(t, rep, doctor.CheckLibfabricVisibility)
	assert.Equal(t, doctor.Warn, vis.Status)
	assert.Equal(t, fmt.Sprintf("2 RDMA devices visible in sysfs cannot be opened here (%d can): libfabric without PR 12744 fails fi_getinfo with -61", len(res.EFAs)), vis.Message)
	assert.Contains(t, check(t, rep, doctor.CheckUverbsNodes).Message, fmt.Sprintf("%d of %d RDMA devices openable", len(res.EFAs), len(res.EFAs)+2))
}

// TestBadRDMANameReported: a uverbs device whose ibdev is no printable
// name (a newline that would forge a line of the report) is an error that
// quotes it, and the name is printed nowhere raw.
func TestBadRDMANameReported(t *testing.T) {
	t.Parallel()
	base := withModules(t, "../../testdata/sysfs/p6-b200.48xlarge.sysfs")
	_, res, err := efa.Scan(base)
	require.NoError(t, err)
	entries := base.Entries()
	renamed := false
	for i, e := range entries {
		if e.Kind == sysfs.KindFile && strings.HasSuffix(e.Path, "/ibdev") && strings.HasPrefix(string(e.Data), "ibp115s0f0") {
			entries[i].Data = []byte("ibp115s0f0\npass forged\n")
			renamed = true
			break
		}
	}
	require.True(t, renamed, "p6-b200 has an mlx5 uverbs device")
	root, err := sysfs.NewMemFS(entries)
	require.NoError(t, err)
	dir := t.TempDir()
	s := &scene{t: t, efas: res.EFAs, opts: doctor.Options{
		Sysfs: root, DevDir: filepath.Join(dir, "dev"), ProcDir: dir, CDIRoot: dir, KubeletDir: dir, MetadataDir: filepath.Join(dir, "metadata"),
		Place: doctor.InPod, Live: live.Static{Mode: rdmans.Shared}, Open: func(string) error { return nil }, Memlock: memlock(unix.RLIM_INFINITY), Environ: []string{},
	}}
	s.mknod(span(0, len(res.EFAs))...)
	rep := s.run()
	for _, c := range rep.Checks {
		assert.NotContains(t, c.Message, "\n", c.ID)
		assert.NotContains(t, c.Fix, "\n", c.ID)
	}
	assert.Contains(t, check(t, rep, doctor.CheckUverbsNodes).Message, `"ibp115s0f0\npass forged"`)
}

func TestKernelAndDevices(t *testing.T) {
	t.Parallel()
	t.Run("no EFA", func(t *testing.T) {
		t.Parallel()
		root, err := sysfs.OpenCapture("../../testdata/sysfs/m5.xlarge.sysfs")
		require.NoError(t, err)
		s := newScene(t, doctor.OnNode)
		s.opts.Sysfs = root
		rep := s.run()
		assertStatuses(t, rep, map[doctor.CheckID]doctor.Status{
			doctor.CheckKernelModules:       doctor.Fail,
			doctor.CheckEFADevices:          doctor.Fail,
			doctor.CheckPCIeLinks:           doctor.Skip,
			doctor.CheckGPUDirect:           doctor.Skip,
			doctor.CheckUverbsNodes:         doctor.Skip,
			doctor.CheckLibfabricVisibility: doctor.Skip,
			doctor.CheckEnvironment:         doctor.Skip,
			doctor.CheckFallback:            doctor.Skip,
			doctor.CheckDeviceMetadata:      doctor.Skip,
			doctor.CheckUnclaimedDevices:    doctor.Skip,
			doctor.CheckDevicePlugin:        doctor.Skip,
			doctor.CheckDRADriver:           doctor.Skip,
			doctor.CheckCDI:                 doctor.Warn,
		})
		km := check(t, rep, doctor.CheckKernelModules)
		assert.Equal(t, "missing from the sysfs root: module/efa, module/ib_uverbs", km.Message)
		assert.Equal(t, "load the efa and ib_uverbs modules (the EFA installer, or an EKS accelerated AMI)", km.Fix)
	})
	t.Run("efa without ib_uverbs", func(t *testing.T) {
		t.Parallel()
		b := fakesys.New()
		b.AddPCI(fakesys.PCI{Addr: "0000:10:1b.0", Vendor: 0x1d0f, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-7"})
		b.AddEFA(fakesys.EFA{Addr: "0000:10:1b.0", IBName: "rdmap16s27", Rate: "100 Gb/sec (4X EDR)", NodeGUID: "0000:0000:0000:0001", GID: "fe80:0000:0000:0000:0000:0000:0000:0001"})
		b.Remove(b.PCIDir("0000:10:1b.0") + "/infiniband_verbs")
		b.Remove("class/infiniband_verbs/uverbs0")
		b.Attr("module/efa/version", "2.13.0g")
		s := newScene(t, doctor.OnNode)
		s.opts.Sysfs = b.FS()
		rep := s.run()
		km := check(t, rep, doctor.CheckKernelModules)
		assert.Equal(t, doctor.Fail, km.Status)
		assert.Equal(t, "loaded: efa 2.13.0g; missing from the sysfs root: module/ib_uverbs", km.Message)
		dev := check(t, rep, doctor.CheckEFADevices)
		assert.Equal(t, doctor.Fail, dev.Status)
		assert.Equal(t, "1 EFA without a uverbs device (ib_uverbs missing): rdmap16s27", dev.Message)
		assert.Contains(t, dev.Fix, "ib_uverbs")
	})
	t.Run("a capture without module/", func(t *testing.T) {
		t.Parallel()
		root, err := sysfs.OpenCapture(p5Capture)
		require.NoError(t, err)
		s := newScene(t, doctor.OnNode)
		s.opts.Sysfs = root
		km := check(t, s.run(), doctor.CheckKernelModules)
		assert.Equal(t, doctor.Pass, km.Status)
		assert.Contains(t, km.Message, "not under module/")
	})
}

func TestRDMANetns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		live live.Live
		want doctor.Status
		msg  string
	}{
		{live.Static{Mode: rdmans.Shared}, doctor.Pass, "shared"},
		{live.Static{Mode: rdmans.Exclusive}, doctor.Fail, "exclusive"},
		{live.Static{Err: errors.New("rdma netns mode: protocol not supported")}, doctor.Skip, "protocol not supported"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			t.Parallel()
			s := newScene(t, doctor.OnNode)
			s.opts.Live = tc.live
			c := check(t, s.run(), doctor.CheckRDMANetns)
			assert.Equal(t, tc.want, c.Status)
			assert.Contains(t, c.Message, tc.msg)
			if tc.want == doctor.Fail {
				assert.Equal(t, "rdma system set netns shared", c.Fix)
			}
		})
	}
}

// TestRefusedInExclusiveMode: in the exclusive RDMA namespace mode the
// kernel refuses a pod its EFA's node (EPERM); doctor says that is why,
// not the runtime. The same refusal in the shared mode is the runtime's
// device cgroup. (The real kernel's refusal: test/e2e/rdmakernel.)
func TestRefusedInExclusiveMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode rdmans.Mode
		err  error
		fix  string
	}{
		{rdmans.Exclusive, unix.EPERM, "the kernel's RDMA namespace mode is exclusive"},
		{rdmans.Shared, unix.EPERM, "through CDI"},
		{rdmans.Exclusive, unix.ENXIO, "through CDI"},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.mode, tc.err), func(t *testing.T) {
			t.Parallel()
			s := newScene(t, doctor.InPod)
			s.opts.Live = live.Static{Mode: tc.mode}
			s.opts.Open = func(string) error { return &fs.PathError{Op: "open", Path: "uverbs0", Err: tc.err} }
			s.mknod(0)
			c := check(t, s.run(), doctor.CheckUverbsNodes)
			assert.Equal(t, doctor.Fail, c.Status)
			assert.Contains(t, c.Message, "cannot open")
			assert.Contains(t, c.Fix, tc.fix)
		})
	}
}

func TestMemlock(t *testing.T) {
	t.Parallel()
	t.Run("this process limited", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.opts.Memlock = memlock(64 << 10)
		c := check(t, s.run(), doctor.CheckMemlock)
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Equal(t, "RLIMIT_MEMLOCK of this process: 65536 bytes (64 KiB), and libfabric pins memory", c.Message)
		assert.Contains(t, c.Fix, "LimitMEMLOCK=infinity")
	})
	t.Run("the runtime limited, this shell not", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		proc := filepath.Join(s.opts.ProcDir, "1200")
		require.NoError(t, os.MkdirAll(proc, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, "comm"), []byte("containerd\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, "limits"), []byte(limitsFile("8388608", "8388608")), 0o644))
		c := check(t, s.run(), doctor.CheckMemlock)
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Equal(t, "RLIMIT_MEMLOCK of containerd (pid 1200), which containers inherit: 8388608 bytes (8192 KiB), and libfabric pins memory; this process: unlimited", c.Message)
	})
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.opts.Memlock = func() (unix.Rlimit, error) {
			return unix.Rlimit{}, errors.New("getrlimit RLIMIT_MEMLOCK: operation not permitted")
		}
		assert.Equal(t, doctor.Skip, check(t, s.run(), doctor.CheckMemlock).Status)
	})
}

func TestDevicePlugin(t *testing.T) {
	t.Parallel()
	t.Run("capacity", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		s.opts.NodeName = nodeName
		s.opts.Client = fakeAPI(&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{resources.DevicePluginResource: apiresource.MustParse("32")}},
		})
		rep := s.run()
		c := check(t, rep, doctor.CheckDevicePlugin)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "node node-1 has capacity vpc.amazonaws.com/efa: 32")
		assert.Contains(t, c.Fix, "remove AWS's EFA device plugin from this node")
		assert.True(t, rep.Failed())
	})
	t.Run("socket", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		s.socket(filepath.Join(s.opts.KubeletDir, "device-plugins", "kubelet.sock"))
		s.socket(filepath.Join(s.opts.KubeletDir, "device-plugins", "aws-efa-device-plugin.sock"))
		c := check(t, s.run(), doctor.CheckDevicePlugin)
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Contains(t, c.Message, "aws-efa-device-plugin.sock")
		assert.NotContains(t, c.Message, "kubelet.sock")
	})
}

func TestDRADriver(t *testing.T) {
	t.Parallel()
	t.Run("auto mode and a foreign slice", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		node := nodeName
		kind := "nic"
		objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{resources.AutoModeLabel: resources.AutoModeValue}}}}
		for _, sl := range s.efakitSlices() {
			objs = append(objs, sl)
		}
		objs = append(objs, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "aws-dra-net-node-1"},
			Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: &node, Pool: resourceapi.ResourcePool{Name: "aws", ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "eth1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: &kind}}}}},
		})
		s.opts.NodeName = nodeName
		s.opts.Client = fakeAPI(objs...)
		c := check(t, s.run(), doctor.CheckDRADriver)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "node node-1 is an EKS Auto Mode node (eks.amazonaws.com/compute-type=auto)")
		assert.Contains(t, c.Message, "another publisher of dra.net on node node-1: ResourceSlice aws-dra-net-node-1 (pool aws, device eth1)")
		assert.Contains(t, c.Fix, "EKS Auto Mode")
		assert.Contains(t, c.Fix, "remove the other dra.net driver")
	})
	t.Run("two registrations", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.OnNode)
		s.socket(filepath.Join(s.opts.KubeletDir, "plugins_registry", drv+"-reg.sock"))
		s.socket(filepath.Join(s.opts.KubeletDir, "plugins_registry", drv+"-0d8e-reg.sock"))
		s.socket(filepath.Join(s.opts.KubeletDir, "plugins_registry", "gpu.nvidia.com-reg.sock"))
		c := check(t, s.run(), doctor.CheckDRADriver)
		assert.Equal(t, doctor.Warn, c.Status)
		assert.Contains(t, c.Message, "2 dra.net registrations")
	})
}

func TestCDI(t *testing.T) {
	t.Parallel()
	s := healthyNode(t)
	require.NoError(t, os.WriteFile(filepath.Join(s.opts.CDIRoot, "dra.net-efa_broken.json"), []byte(`{"cdiVersion": "0.5.0", "kind": "dra.net/efa", "devices": [], "extra": 1}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(s.opts.CDIRoot, "notes.txt"), []byte("not a spec"), 0o644))
	c := check(t, s.run(), doctor.CheckCDI)
	assert.Equal(t, doctor.Fail, c.Status)
	assert.Contains(t, c.Message, "3 spec files in "+s.opts.CDIRoot+" (2 dra.net-efa_*.json, 1 dra.net_metadata_*.json); 1 do not load: dra.net-efa_broken.json (")
	assert.NotContains(t, c.Message, "notes.txt")
	assert.Contains(t, c.Fix, "remove or rewrite them")
}

// TestReportJSON: the report survives JSON unchanged.
func TestReportJSON(t *testing.T) {
	t.Parallel()
	s := newScene(t, doctor.InPod)
	s.mknod(0, 1, 2, 3)
	rep := s.run()
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back doctor.Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep, &back)
	assert.Contains(t, string(b), `"id":"libfabric-visibility","status":"warn"`)
}

func TestDetectPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	assert.Equal(t, doctor.OnNode, doctor.DetectPlace(filepath.Join(dir, "none"), []string{"HOME=/root"}))
	assert.Equal(t, doctor.InPod, doctor.DetectPlace(filepath.Join(dir, "none"), []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"}))
	assert.Equal(t, doctor.InPod, doctor.DetectPlace(dir, nil))
}

func TestRunNeedsSysfs(t *testing.T) {
	t.Parallel()
	_, err := doctor.Run(context.Background(), doctor.Options{})
	assert.Error(t, err)
}

// ExampleRun runs every check on a bundled p5.48xlarge capture, as on a
// node whose /dev holds no uverbs node.
func ExampleRun() {
	root, err := sysfs.Open("../../testdata/sysfs/p5.48xlarge.sysfs")
	if err != nil {
		panic(err)
	}
	defer root.Close()
	rep, err := doctor.Run(context.Background(), doctor.Options{
		Sysfs:       root,
		DevDir:      "/nonexistent/dev",
		ProcDir:     "/nonexistent/proc",
		CDIRoot:     "/nonexistent/cdi",
		KubeletDir:  "/nonexistent/kubelet",
		MetadataDir: "/nonexistent/metadata",
		Place:       doctor.OnNode,
		Live:        live.Static{Mode: rdmans.Shared},
		Memlock:     func() (unix.Rlimit, error) { return unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil },
		Environ:     []string{},
	})
	if err != nil {
		panic(err)
	}
	for _, c := range rep.Checks {
		fmt.Println(c.Status, c.ID)
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// pass kernel-modules
	// pass efa-devices
	// pass pcie-links
	// pass gpudirect
	// fail uverbs-nodes
	// fail libfabric-visibility
	// pass rdma-netns
	// pass memlock
	// skip environment
	// skip fallback
	// skip device-metadata
	// skip unclaimed-devices
	// skip device-plugin
	// skip dra-driver
	// warn cdi
	// failed: true
}

// TestFallback: each environment and file that makes libfabric or NCCL
// leave the container's EFAs for TCP, or keeps GPUDirect RDMA off, and
// its fix; and the environments that keep them on EFA.
func TestFallback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		capture string
		setup   func(s *scene)
		want    doctor.Status
		message []string
		fix     string
	}{
		{name: "on EFA", setup: func(s *scene) { s.mknod(span(0, 32)...); s.ofiNCCL() }, want: doctor.Pass,
			message: []string{"NCCL loads its network plugin /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"}},
		{name: "FI_PROVIDER=tcp", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "FI_PROVIDER=tcp")
		}, want: doctor.Fail, message: []string{"FI_PROVIDER=tcp: libfabric will not use EFA"}, fix: "unset FI_PROVIDER"},
		{name: "no EFA held", setup: func(s *scene) { s.ofiNCCL() }, want: doctor.Fail,
			message: []string{"this container can open no EFA"}, fix: "ResourceClaim"},
		{name: "FI_EFA_IFACE names others", setup: func(s *scene) {
			s.mknod(0, 1)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "FI_EFA_IFACE="+s.efas[5].Name)
		}, want: doctor.Fail, message: []string{"FI_EFA_IFACE=rdmap97s0 names no EFA this container can open"}, fix: "rdmap79s0,rdmap80s0"},
		{name: "NCCL_NET=Socket", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "NCCL_NET=Socket")
		}, want: doctor.Fail, message: []string{"NCCL_NET=Socket: NCCL uses TCP sockets"}, fix: "unset NCCL_NET"},
		{name: "NCCL_NET=IB", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "NCCL_NET=IB")
		}, want: doctor.Fail, message: []string{"reliable-connected queue pairs an EFA does not have"}},
		{name: "NCCL_NET=Libfabric", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "NCCL_NET=Libfabric")
		}, want: doctor.Pass, message: []string{"NCCL_NET=Libfabric: aws-ofi-nccl's plugin"}},
		{name: "NCCL_NET_PLUGIN=none", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = []string{"NCCL_NET_PLUGIN=none", "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib"}
		}, want: doctor.Fail, message: []string{"NCCL_NET_PLUGIN=none: NCCL loads no network plugin"}},
		{name: "no plugin", setup: func(s *scene) { s.mknod(span(0, 32)...) }, want: doctor.Warn,
			message: []string{"NCCL would load no network plugin: libnccl-net.so is in none of the loader's directories (/lib, /usr/lib"}, fix: "install aws-ofi-nccl"},
		{name: "plugin not named", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			s.ofiNCCL()
			s.opts.Environ = []string{"LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib"}
		}, want: doctor.Warn, message: []string{"libnccl-net.so is in none"}, fix: "NCCL_NET_PLUGIN=ofi"},
		{name: "plugin through ld.so.conf", setup: func(s *scene) {
			s.mknod(span(0, 32)...)
			root := s.root()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/ld.so.conf.d"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("# the loader's\ninclude /etc/ld.so.conf.d/*.conf\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf.d/nccl.conf"), []byte("/opt/nccl/lib\n"), 0o644))
			require.NoError(t, os.MkdirAll(filepath.Join(root, "opt/nccl/lib"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "opt/nccl/lib/libnccl-net.so"), nil, 0o644))
		}, want: doctor.Pass, message: []string{"NCCL loads its network plugin /opt/nccl/lib/libnccl-net.so"}},
		{name: "p4d with aws-ofi-nccl's topology", capture: "../../testdata/sysfs/p4d.24xlarge.sysfs", setup: func(s *scene) {
			s.mknod(span(0, 4)...)
			s.ofiNCCL()
		}, want: doctor.Pass, message: []string{"8 GPU-EFA pairs beyond NCCL's default GDR level, PXB: aws-ofi-nccl's topology file for p4d.24xlarge (p4d-24xl-topo.xml)"}},
		{name: "p4d with the user's topology", capture: "../../testdata/sysfs/p4d.24xlarge.sysfs", setup: func(s *scene) {
			s.mknod(span(0, 4)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "NCCL_TOPO_FILE=/workspace/topo.xml")
		}, want: doctor.Warn, message: []string{"NCCL_TOPO_FILE=/workspace/topo.xml replaces aws-ofi-nccl's p4d-24xl-topo.xml"}, fix: "NCCL_NET_GDR_LEVEL=PHB"},
		{name: "p4d with NCCL_NET_GDR_LEVEL=PHB", capture: "../../testdata/sysfs/p4d.24xlarge.sysfs", setup: func(s *scene) {
			s.mknod(span(0, 4)...)
			s.ofiNCCL()
			s.opts.Environ = append(s.opts.Environ, "NCCL_TOPO_FILE=/workspace/topo.xml", "NCCL_NET_GDR_LEVEL=PHB")
		}, want: doctor.Pass, message: []string{"NCCL loads its network plugin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			capture := cmp.Or(tc.capture, p5Capture)
			s := sceneOf(t, capture, doctor.InPod)
			tc.setup(s)
			c := check(t, s.run(), doctor.CheckFallback)
			assert.Equal(t, tc.want, c.Status, "%s | %s", c.Message, c.Fix)
			for _, m := range tc.message {
				assert.Contains(t, c.Message, m)
			}
			assert.Contains(t, c.Fix, tc.fix)
		})
	}
}
