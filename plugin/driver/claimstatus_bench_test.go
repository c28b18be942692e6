package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/efakit/efakit/plugin/driver"
)

// apiServerAnswering is a fake clientset whose status writes of claims
// take delay each and are kept as sent, as an API server under that load
// answers them; it counts them. It is the status writer's client alone: a
// fake clientset answers one call at a time (a lock around its
// reactions), where an API server answers the helper's claim reads beside
// slow writes.
func apiServerAnswering(delay time.Duration, written *int64) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetSubresource() != "status" {
			return false, nil, nil
		}
		time.Sleep(delay)
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal(p.GetPatch(), &c); err != nil {
			return true, nil, err
		}
		*written++ // one writer goroutine per plugin
		return true, &c, nil
	})
	return client
}

// BenchmarkPrepareClaimStatus: what writing each prepared claim's
// status.devices costs a prepare, the kubelet's call through the plugin's
// gRPC socket, as BenchmarkPrepareLatency makes it (a 4-EFA claim, the
// CDI directory and checkpoint on tmpfs so that the disk's noise does not
// drown the difference). Three plugins run side by side, each on its own
// directories and fake API server, and the calls go to them in turn, so
// that the machine's load falls on all alike: no status writes; writes
// answered at once; writes that take 100 ms each (an API server under
// load: the writer falls behind, retries nothing, and a prepare must not
// wait for it). It reports each one's prepare p50 and p99 and, per round
// of calls, the ratio of the writing plugins' p50 to the plain one's,
// with its spread.
func BenchmarkPrepareClaimStatus(b *testing.B) {
	c := claim("four", "11111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0")
	type contender struct {
		name    string
		dra     drapb.DRAPluginClient
		written int64
		calls   []time.Duration
		p50s    []time.Duration
	}
	cs := []*contender{{name: "off"}, {name: "on"}, {name: "on-api-100ms"}}
	for i, x := range cs {
		st := driver.ClaimStatusOptions{Off: i == 0}
		if i > 0 {
			st.Client = apiServerAnswering(map[int]time.Duration{1: 0, 2: 100 * time.Millisecond}[i], &x.written)
		}
		dir := tmpfsDir(b)
		x.dra = servePluginWith(b, dir, dir, nil, func(o *driver.ServeOptions) { o.ClaimStatus = st }, c)
	}
	ctx := context.Background()
	claims := []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}
	const perRound = 100
	b.ReportAllocs()
	for b.Loop() {
		round := make([][]time.Duration, len(cs))
		for range perRound {
			for i, x := range cs {
				start := time.Now()
				resp, err := x.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
				d := time.Since(start)
				if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
					b.Fatal(err, resp)
				}
				round[i] = append(round[i], d)
				if _, err := x.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims}); err != nil {
					b.Fatal(err)
				}
			}
		}
		for i, x := range cs {
			slices.Sort(round[i])
			x.calls = append(x.calls, round[i]...)
			x.p50s = append(x.p50s, quantile(round[i], 0.5))
		}
	}
	for i, x := range cs {
		slices.Sort(x.calls)
		b.ReportMetric(ms(quantile(x.calls, 0.50)), x.name+"-p50-ms")
		b.ReportMetric(ms(quantile(x.calls, 0.99)), x.name+"-p99-ms")
		if i == 0 {
			continue
		}
		var ratios []float64
		for r := range x.p50s {
			ratios = append(ratios, float64(x.p50s[r])/float64(cs[0].p50s[r]))
		}
		sort.Float64s(ratios)
		b.ReportMetric(ratios[len(ratios)/2], x.name+"/off-p50-ratio")
		b.Logf("%s/off: prepare p50 ratio %.2f [%.2f-%.2f] over %d rounds of %d calls; %d status writes answered", x.name,
			ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], len(ratios), perRound, x.written)
	}
	if cs[1].written == 0 {
		b.Fatal(fmt.Errorf("no status write reached the API server: the contender measures nothing"))
	}
}
