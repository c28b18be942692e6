package health_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/efakit/efakit/efa/health"
)

// A Tracker grades one EFA from samples of its port and counters: the
// first sample is the baseline, and a rule fires once its counters
// advance by its limit within the window. Here 11 RDMA reads fail by
// t=20s; with no more, the rule holds until the window (a minute) no
// longer holds their advance: at t=80s the baseline is t=20s's sample.
func ExampleTracker() {
	p := health.DefaultPolicy()
	p.Window = time.Minute
	tr := health.NewTracker(p)
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for i, errs := range []uint64{0, 4, 11, 11, 11, 11, 11, 11, 11} {
		v := tr.Observe("rdmap79s0", health.Sample{
			At: at.Add(time.Duration(i) * 10 * time.Second), State: "ACTIVE", RateGbps: 100,
			Counters: map[string]uint64{"rdma_read_wr_err": errs, "rdma_write_wr_err": 0},
		}, 100)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("t=%ds %s %s", i*10, v.Grade, v.Message)))
	}
	// Output:
	// t=0s Healthy
	// t=10s Healthy
	// t=20s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=30s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=40s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=50s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=60s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=70s Degraded 11 failed RDMA work requests in 1m0s (limit 10)
	// t=80s Healthy
}
