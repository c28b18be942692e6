package driver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/plugin/driver"
)

// slowSync is the fsync BenchmarkReadersDuringPrepare gives the plugin: a
// disk under other writers, as a busy node's can be.
const slowSync = 100 * time.Millisecond

// readerSamples is how many times each reader asks in one phase of a
// round, readerPace apart: two seconds of a burst, about twenty saves.
const (
	readerSamples = 100
	readerPace    = 20 * time.Millisecond
)

// BenchmarkReadersDuringPrepare runs the plugin as the DaemonSet does on
// the p5 capture, with every fsync taking slowSync, and times what the
// node's other clients ask while the kubelet prepares: /metrics (the
// scrape, the EFA exporter's targets among it), /readyz (the probe) and
// a health report (the kubelet's health stream, opened on the plugin's
// DRA socket, to its first report of every device).
// Rounds alternate, interleaved: "idle", the readers alone, and "burst",
// the readers while eight 4-EFA claims are prepared and unprepared over
// and over, one goroutine each, as a burst of pods does. It reports each
// reader's p50 and p99 in both, in milliseconds, and the ratio of the
// burst p99 to the idle p99.
func BenchmarkReadersDuringPrepare(b *testing.B) {
	dir := diskDir(b)
	addr := freeAddr(b)
	var claims []*resourceapi.ResourceClaim
	for k, bus := range []int{0x4f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6} {
		var devs []string
		for i := range 4 {
			devs = append(devs, fmt.Sprintf("efa-0000-%02x-00-0", bus+i))
		}
		claims = append(claims, claim(fmt.Sprintf("burst-%d", k), fmt.Sprintf("00000000-0000-0000-0000-%012d", k), devs...))
	}
	slow := func(f *os.File) error {
		time.Sleep(slowSync)
		return f.Sync()
	}
	conn := servePluginConn(b, dir, dir, slow, func(o *driver.ServeOptions) { o.HTTPAddr = addr }, claims...)
	dra := drapb.NewDRAPluginClient(conn)
	readers := []string{"/metrics", "/readyz", healthReader}
	var mu sync.Mutex
	samples := map[string][]time.Duration{}
	client := &http.Client{Timeout: 30 * time.Second}
	// read runs the readers side by side, each asking readerSamples
	// times, readerPace apart, as a scraper and a probe do.
	read := func(phase string) {
		var wg sync.WaitGroup
		for _, path := range readers {
			wg.Go(func() {
				tick := time.NewTicker(readerPace)
				defer tick.Stop()
				for range readerSamples {
					<-tick.C
					start := time.Now()
					if err := readOnce(client, conn, addr, path); err != nil {
						b.Error(err)
						return
					}
					took := time.Since(start)
					mu.Lock()
					samples[phase+" "+path] = append(samples[phase+" "+path], took)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	var prepares atomic.Int64
	burst := func() {
		ctx := context.Background()
		var stop atomic.Bool
		var wg sync.WaitGroup
		for _, c := range claims {
			req := []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}
			wg.Go(func() {
				for !stop.Load() {
					resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
					if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
						b.Error(err, resp)
						return
					}
					prepares.Add(1)
					if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		// The burst under way: the first saves are in.
		for prepares.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		read("burst")
		// Each goroutine ends after its call's unprepare, so no call is
		// left running into the next idle phase.
		stop.Store(true)
		wg.Wait()
	}
	for b.Loop() {
		read("idle")
		burst()
	}
	for _, path := range readers {
		idle, busy := sorted(samples["idle "+path]), sorted(samples["burst "+path])
		name := path[1:]
		b.ReportMetric(ms(quantile(idle, 0.5)), name+"-idle-p50-ms")
		b.ReportMetric(ms(quantile(idle, 0.99)), name+"-idle-p99-ms")
		b.ReportMetric(ms(quantile(busy, 0.5)), name+"-burst-p50-ms")
		b.ReportMetric(ms(quantile(busy, 0.99)), name+"-burst-p99-ms")
		b.ReportMetric(float64(quantile(busy, 0.99))/float64(quantile(idle, 0.99)), name+"-p99-burst/idle")
	}
	b.ReportMetric(float64(prepares.Load())/float64(b.N), "prepares/round")
}

// healthReader names the health report among the readers.
const healthReader = "/health-report"

// readOnce asks one reader once: an HTTP path of the plugin's server, or
// the health stream's first report of every device (healthReader).
func readOnce(client *http.Client, conn *grpc.ClientConn, addr, path string) error {
	if path == healthReader {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		if err != nil {
			return err
		}
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		if len(r.Devices) == 0 {
			return fmt.Errorf("%s: no device", path)
		}
		return nil
	}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

func sorted(d []time.Duration) []time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
