package driver_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/rdmans"
)

// prepareCalls is how many prepare and unprepare calls one iteration of
// BenchmarkPrepareLatency makes: enough for a p99 of ten samples.
const prepareCalls = 1000

// BenchmarkPrepareLatency runs the plugin as the DaemonSet does (Serve:
// the kubelet plugin helper, its device metadata, the CDI watch) on the p5
// capture and makes prepareCalls NodePrepareResources and
// NodeUnprepareResources gRPC calls of one 4-EFA claim, as the kubelet
// does, timing each. It reports their p50 and p99 in milliseconds, over
// every call of the run. Two layouts: the CDI directory on a tmpfs (the
// usual node, /var/run/cdi) with the data directory (checkpoint, device
// metadata) on disk, and everything on disk. "Disk" is checked, not
// assumed: a temporary directory on a tmpfs is not one.
func BenchmarkPrepareLatency(b *testing.B) {
	b.Run("cdi=tmpfs,checkpoint=disk", func(b *testing.B) {
		benchPrepareLatency(b, tmpfsDir(b), diskDir(b))
	})
	b.Run("cdi=disk,checkpoint=disk", func(b *testing.B) {
		benchPrepareLatency(b, diskDir(b), diskDir(b))
	})
}

// ramFS tells whether dir is on a file system held in memory.
func ramFS(b *testing.B, dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		b.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// tmpfsDir is a new directory on a writable tmpfs, removed at the end.
func tmpfsDir(b *testing.B) string {
	for _, base := range []string{"/dev/shm", "/run", os.TempDir()} {
		if _, err := os.Stat(base); err != nil || !ramFS(b, base) {
			continue
		}
		dir, err := os.MkdirTemp(base, "efakit-bench")
		if err != nil {
			continue // not writable
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	b.Skip("no writable tmpfs (tried /dev/shm, /run and the temporary directory): the tmpfs layout is not measured")
	return ""
}

// diskDir is a new directory on a disk, removed at the end: under the
// temporary directory, or under the repository's bin/ where TMPDIR is a
// tmpfs. Short, since the plugin's sockets go beneath it.
func diskDir(b *testing.B) string {
	for _, base := range []string{os.TempDir(), filepath.Join("..", "..", "bin")} {
		if err := os.MkdirAll(base, 0o755); err != nil || ramFS(b, base) {
			continue
		}
		dir, err := os.MkdirTemp(base, "efa")
		if err != nil {
			continue
		}
		if dir, err = filepath.Abs(dir); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	b.Skip("no directory on a disk (the temporary directory and bin/ are both in memory): the disk layouts are not measured")
	return ""
}

func benchPrepareLatency(b *testing.B, cdiDir, dataDir string) {
	c := claim("four", "11111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0")
	dra := servePlugin(b, cdiDir, dataDir, nil, c)
	ctx := context.Background()
	claims := []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}
	var prep, unprep []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		for range prepareCalls {
			start := time.Now()
			resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
			prep = append(prep, time.Since(start))
			if err != nil || resp.Claims[string(c.UID)].GetError() != "" || len(resp.Claims[string(c.UID)].GetDevices()) != 4 {
				b.Fatal(err, resp)
			}
			start = time.Now()
			uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
			unprep = append(unprep, time.Since(start))
			if err != nil || uresp.Claims[string(c.UID)].GetError() != "" {
				b.Fatal(err, uresp)
			}
		}
	}
	for _, m := range []struct {
		op string
		d  []time.Duration
	}{{"prepare", prep}, {"unprepare", unprep}} {
		slices.Sort(m.d)
		b.ReportMetric(ms(quantile(m.d, 0.50)), m.op+"-p50-ms")
		b.ReportMetric(ms(quantile(m.d, 0.99)), m.op+"-p99-ms")
	}
}

// servePlugin runs the plugin as the DaemonSet does (Serve) on the p5
// capture, with its CDI directory under cdiDir and its data directory,
// sockets and proc root under dataDir, and the claims in a fake API
// server; it registers it as the kubelet does and returns a DRA client on
// the endpoint it announced. sync, when set, replaces every fsync. The
// plugin stops at the end of the test.
func servePlugin(tb testing.TB, cdiDir, dataDir string, sync func(*os.File) error, claims ...*resourceapi.ResourceClaim) drapb.DRAPluginClient {
	tb.Helper()
	return servePluginWith(tb, cdiDir, dataDir, sync, nil, claims...)
}

// servePluginWith is servePlugin with the options changed by mod (claim
// status writes, the HTTP server); nil changes nothing.
func servePluginWith(tb testing.TB, cdiDir, dataDir string, sync func(*os.File) error, mod func(*driver.ServeOptions), claims ...*resourceapi.ResourceClaim) drapb.DRAPluginClient {
	tb.Helper()
	return drapb.NewDRAPluginClient(servePluginConn(tb, cdiDir, dataDir, sync, mod, claims...))
}

// servePluginConn is servePluginWith's connection to the plugin's DRA
// socket, which also serves the kubelet's health stream.
func servePluginConn(tb testing.TB, cdiDir, dataDir string, sync func(*os.File) error, mod func(*driver.ServeOptions), claims ...*resourceapi.ResourceClaim) *grpc.ClientConn {
	tb.Helper()
	client := fake.NewClientset()
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, c := range claims {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	proc := filepath.Join(dataDir, "proc")
	for _, d := range []string{filepath.Join(proc, "sys/kernel/random"), filepath.Join(dataDir, "reg")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/random/boot_id"), []byte(bootA+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	ready, done := make(chan struct{}), make(chan error, 1)
	opts := driver.ServeOptions{
		Config: resources.Config{NodeName: node}, KubeClient: client,
		Paths: driver.Paths{SysfsRoot: p5, ProcRoot: proc, CDIRoot: filepath.Join(cdiDir, "cdi"),
			RegistrarDir: filepath.Join(dataDir, "reg"), PluginsDir: filepath.Join(dataDir, "plugins")},
		Ready: ready, Kernel: driver.Kernel{Live: live.Static{Mode: rdmans.Shared}, Sync: sync},
	}
	if mod != nil {
		mod(&opts)
	}
	go func() { done <- driver.Serve(ctx, opts) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		tb.Fatalf("plugin stopped: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	regConn, err := grpc.NewClient("unix://"+filepath.Join(dataDir, "reg", "dra.net-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	defer regConn.Close()
	reg := registerapi.NewRegistrationClient(regConn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// quantile is the q-quantile of sorted samples, by nearest rank: of 1,000
// calls, the p99 is the 990th fastest.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
