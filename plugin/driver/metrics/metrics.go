package metrics

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the plugin's Prometheus metrics, in a registry of their own
// (no global state: tests run several plugins in one process).
type Metrics struct {
	Registry *prometheus.Registry
	Calls    *prometheus.CounterVec   // efakit_plugin_calls_total{op,result}
	Latency  *prometheus.HistogramVec // efakit_plugin_call_seconds{op}
	// Waited is the time from a kubelet call's arrival to the plugin's
	// start on it: the helper reading the call's claims from the API
	// server (its client's rate limit included) and waiting for the calls
	// before it (it serializes them).
	Wait      *prometheus.HistogramVec // efakit_plugin_call_wait_seconds{op}
	Scans     Scans
	Published prometheus.Counter // efakit_plugin_publish_total
	// Renumbered counts EFAs of prepared claims found with another uverbs
	// device than their spec gave (a module reload).
	Renumbered prometheus.Counter // efakit_plugin_renumbered_devices_total
	// SpecsRestored counts CDI specs of prepared claims (and their
	// device-metadata specs) written again because the directory lost them.
	SpecsRestored prometheus.Counter // efakit_plugin_cdi_specs_restored_total
	Health        Health
	// StorageWritable is 1 while the plugin can write in a directory it
	// prepares with ("cdi", "data"), 0 while it is read-only or full.
	StorageWritable *prometheus.GaugeVec // efakit_plugin_storage_writable{dir}
	// StandingAside is 1 while the plugin publishes nothing and prepares
	// nothing, by reason ("device-plugin", "dra-driver", "netns", "api").
	StandingAside *prometheus.GaugeVec // efakit_plugin_standing_aside{reason}
	// ClaimStatus counts the writes of claims' status.devices, by outcome
	// (claimstatus.Outcome: written, retry, gone, forbidden, dropped, failed).
	ClaimStatus *prometheus.CounterVec // efakit_plugin_claim_status_writes_total{outcome}
}

// Health are the metrics of the devices' health.
type Health struct {
	// Unhealthy is the number of unhealthy devices kept from new
	// allocations, by how: "taint" (a NoSchedule or NoExecute device
	// taint) or "withhold" (left out of the slice, where the API server
	// drops taints).
	Unhealthy *prometheus.GaugeVec // efakit_plugin_unhealthy_devices{action}
	// Degraded is the number of degraded devices, by how they are marked:
	// "taint" (a taint of effect None) or "none" (the API server keeps no
	// such taint).
	Degraded *prometheus.GaugeVec // efakit_plugin_degraded_devices{action}
	// Grade is 1 for each device that is not healthy, with its grade
	// ("Degraded", "Unhealthy") and reason; a healthy device has none.
	Grade *prometheus.GaugeVec // efakit_plugin_device_health{device,grade,reason}
	// IdleClaims is the number of prepared claims with a device that
	// carried no RDMA traffic for --idle-after.
	IdleClaims prometheus.Gauge // efakit_plugin_idle_claims
}

// Scans are the metrics of the sysfs scans.
type Scans struct {
	Devices prometheus.Gauge     // efakit_plugin_devices
	Errors  prometheus.Counter   // efakit_plugin_scan_errors_total
	Time    prometheus.Histogram // efakit_plugin_scan_seconds
}

// New registers the plugin's metrics in a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efakit_plugin_calls_total", Help: "Claims prepared and unprepared, by result.",
		}, []string{"op", "result"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "efakit_plugin_call_seconds", Help: "Time to prepare or unprepare one claim.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"op"}),
		Wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "efakit_plugin_call_wait_seconds", Help: "Time from a kubelet call's arrival to the plugin's start on it: the helper's claim reads and the calls before it.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"op"}),
		Scans: Scans{
			Devices: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "efakit_plugin_devices", Help: "EFAs found by the last scan and published.",
			}),
			Errors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "efakit_plugin_scan_errors_total", Help: "Scans of sysfs that met damaged devices or files.",
			}),
			Time: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "efakit_plugin_scan_seconds", Help: "Time to scan sysfs and build the devices.",
				Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
			}),
		},
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "efakit_plugin_publish_total", Help: "Times the devices changed and were published.",
		}),
	}
	m.Renumbered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "efakit_plugin_renumbered_devices_total", Help: "EFAs of prepared claims whose uverbs device was numbered anew (module reload); their specs were corrected.",
	})
	m.SpecsRestored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "efakit_plugin_cdi_specs_restored_total", Help: "CDI specs of prepared claims written again because the CDI directory lost them (at start, or while running).",
	})
	m.Health = Health{
		Unhealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "efakit_plugin_unhealthy_devices", Help: "Unhealthy devices kept from new allocations: by a NoSchedule or NoExecute taint, or withheld from the slice where the API server drops taints.",
		}, []string{"action"}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "efakit_plugin_degraded_devices", Help: "Degraded devices, still allocated: marked by a taint of effect None, or not marked where the API server keeps no such taint.",
		}, []string{"action"}),
		Grade: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "efakit_plugin_device_health", Help: "1 for each device that is not healthy, with its grade (Degraded, Unhealthy) and reason.",
		}, []string{"device", "grade", "reason"}),
	}
	m.StandingAside = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "efakit_plugin_standing_aside", Help: "1 while the plugin publishes and prepares nothing, by reason.",
	}, []string{"reason"})
	m.StorageWritable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "efakit_plugin_storage_writable", Help: "1 while the plugin can write in the directory (cdi: the CDI specs; data: the checkpoint), 0 while its file system is read-only or full.",
	}, []string{"dir"})
	m.ClaimStatus = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "efakit_plugin_claim_status_writes_total", Help: "Writes of prepared claims' status.devices (server-side apply), by outcome: written, retry, gone (the claim was deleted or deallocated meanwhile), forbidden, dropped (the API server keeps no device status), failed.",
	}, []string{"outcome"})
	m.Health.IdleClaims = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "efakit_plugin_idle_claims", Help: "Prepared claims with a device that carried no RDMA traffic for --idle-after (its TrafficSeen condition is False).",
	})
	m.Registry.MustRegister(m.Own()...)
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Own are the plugin's own collectors, which New registers (beside Go's
// and the process's, and the EFA exporter, which the plugin adds).
func (m *Metrics) Own() []prometheus.Collector {
	return []prometheus.Collector{m.StorageWritable, m.ClaimStatus, m.Calls, m.Latency, m.Wait, m.Scans.Devices, m.Published,
		m.Scans.Errors, m.Scans.Time, m.Renumbered, m.SpecsRestored, m.Health.Unhealthy, m.Health.Degraded, m.Health.Grade, m.StandingAside, m.Health.IdleClaims}
}

// Observe records a prepare or unprepare (op) of one claim.
func (m *Metrics) Observe(op string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.Calls.WithLabelValues(op, result).Inc()
	m.Latency.WithLabelValues(op).Observe(d.Seconds())
}

// Waited observes how long a kubelet call waited before the plugin started
// on it (zero when the call did not come through the helper's gRPC
// server: tests calling the plugin directly).
func (m *Metrics) Waited(op string, ctx context.Context) time.Duration {
	at, ok := ctx.Value(arrivalKey{}).(time.Time)
	if !ok {
		return 0
	}
	d := time.Since(at)
	m.Wait.WithLabelValues(op).Observe(d.Seconds())
	return d
}

// arrivalKey holds the time a kubelet call arrived in its context.
type arrivalKey struct{}

// StampArrival is a gRPC interceptor that records in a call's context when
// it arrived, before the helper reads its claims and waits for the calls
// before it.
func StampArrival(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(context.WithValue(ctx, arrivalKey{}, time.Now()), req)
}

// ObserveScan records a scan: its time, whether it met errors, the devices
// it found.
func (m *Metrics) ObserveScan(d time.Duration, err error, devices int) {
	m.Scans.Time.Observe(d.Seconds())
	if err != nil {
		m.Scans.Errors.Inc()
	}
	m.Scans.Devices.Set(float64(devices))
}
