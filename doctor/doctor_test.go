package doctor_test

import (
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

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/doctor"
	"github.com/efakit/efakit/driver/resources"
	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

const (
	p5Capture = "../testdata/sysfs/p5.48xlarge.sysfs"
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
	root := withModules(t, p5Capture)
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	require.Len(t, res.EFAs, 32)
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
		Live:        efa.StaticLive{Mode: efa.NetnsShared},
		Open:        func(string) error { return nil },
		Memlock:     memlock(unix.RLIM_INFINITY),
		Environ:     []string{},
	}}
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
	require.Len(s.t, rep.Checks, 12)
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
		doctor.CheckEnvironment:    doctor.Skip,
		doctor.CheckDeviceMetadata: doctor.Skip,
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
	rep := s.run()
	assert.Equal(t, doctor.InPod, rep.Place)
	assert.False(t, rep.Failed())
	assertStatuses(t, rep, map[doctor.CheckID]doctor.Status{
		doctor.CheckLibfabricVisibility: doctor.Warn,
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
	assert.Equal(t, "1 dra.net metadata file name 4 EFAs (rdmap79s0, rdmap80s0, rdmap81s0, rdmap82s0), each openable here, and no other EFA is",
		check(t, rep, doctor.CheckDeviceMetadata).Message)
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
	t.Run("an openable EFA no file names", func(t *testing.T) {
		t.Parallel()
		s := newScene(t, doctor.InPod)
		s.mknod(0, 1, 2, 3)
		s.metadataFile("efas", "efas", s.efaMetadata(0, 1, 2)...)
		c := check(t, s.run(), doctor.CheckDeviceMetadata)
		assert.Equal(t, doctor.Fail, c.Status)
		assert.Contains(t, c.Message, "this container can open 1 EFA that no dra.net metadata file names: rdmap82s0")
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
	root := withModules(t, "../testdata/sysfs/p6-b200.48xlarge.sysfs")
	_, res, err := efa.Scan(root)
	require.NoError(t, err)
	dir := t.TempDir()
	s := &scene{t: t, efas: res.EFAs, opts: doctor.Options{
		Sysfs: root, DevDir: filepath.Join(dir, "dev"), ProcDir: dir, CDIRoot: dir, KubeletDir: dir, MetadataDir: filepath.Join(dir, "metadata"),
		Place: doctor.InPod, Live: efa.StaticLive{Mode: efa.NetnsShared}, Open: func(string) error { return nil }, Memlock: memlock(unix.RLIM_INFINITY), Environ: []string{},
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
	base := withModules(t, "../testdata/sysfs/p6-b200.48xlarge.sysfs")
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
		Place: doctor.InPod, Live: efa.StaticLive{Mode: efa.NetnsShared}, Open: func(string) error { return nil }, Memlock: memlock(unix.RLIM_INFINITY), Environ: []string{},
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
		root, err := sysfs.OpenCapture("../testdata/sysfs/m5.xlarge.sysfs")
		require.NoError(t, err)
		s := newScene(t, doctor.OnNode)
		s.opts.Sysfs = root
		rep := s.run()
		assertStatuses(t, rep, map[doctor.CheckID]doctor.Status{
			doctor.CheckKernelModules:       doctor.Fail,
			doctor.CheckEFADevices:          doctor.Fail,
			doctor.CheckPCIeLinks:           doctor.Skip,
			doctor.CheckUverbsNodes:         doctor.Skip,
			doctor.CheckLibfabricVisibility: doctor.Skip,
			doctor.CheckEnvironment:         doctor.Skip,
			doctor.CheckDeviceMetadata:      doctor.Skip,
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
		b.AddPCI(fakesys.PCI{Addr: "0000:10:1b.0", Vendor: efa.VendorAmazon, Device: 0xefa1, Class: 0x020000, Driver: "efa", NUMA: 0, CPUs: "0-7"})
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
		live efa.Live
		want doctor.Status
		msg  string
	}{
		{efa.StaticLive{Mode: efa.NetnsShared}, doctor.Pass, "shared"},
		{efa.StaticLive{Mode: efa.NetnsExclusive}, doctor.Fail, "exclusive"},
		{efa.StaticLive{Err: errors.New("rdma netns mode: protocol not supported")}, doctor.Skip, "protocol not supported"},
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
	root, err := sysfs.Open("../testdata/sysfs/p5.48xlarge.sysfs")
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
		Live:        efa.StaticLive{Mode: efa.NetnsShared},
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
	// fail uverbs-nodes
	// fail libfabric-visibility
	// pass rdma-netns
	// pass memlock
	// skip environment
	// skip device-metadata
	// skip device-plugin
	// skip dra-driver
	// warn cdi
	// failed: true
}
