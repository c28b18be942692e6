package driver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the plugin's Prometheus metrics, in a registry of their own
// (no global state: tests run several plugins in one process).
type Metrics struct {
	Registry  *prometheus.Registry
	Calls     *prometheus.CounterVec   // efakit_plugin_calls_total{op,result}
	Latency   *prometheus.HistogramVec // efakit_plugin_call_seconds{op}
	Devices   prometheus.Gauge         // efakit_plugin_devices
	Published prometheus.Counter       // efakit_plugin_publish_total
	ScanErrs  prometheus.Counter       // efakit_plugin_scan_errors_total
	ScanTime  prometheus.Histogram     // efakit_plugin_scan_seconds
}

// NewMetrics registers the plugin's metrics in a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efakit_plugin_calls_total", Help: "Claims prepared and unprepared, by result.",
		}, []string{"op", "result"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "efakit_plugin_call_seconds", Help: "Time to prepare or unprepare one claim.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"op"}),
		Devices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "efakit_plugin_devices", Help: "EFAs found by the last scan and published.",
		}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "efakit_plugin_publish_total", Help: "Times the devices changed and were published.",
		}),
		ScanErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "efakit_plugin_scan_errors_total", Help: "Scans of sysfs that met damaged devices or files.",
		}),
		ScanTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "efakit_plugin_scan_seconds", Help: "Time to scan sysfs and build the devices.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
	}
	m.Registry.MustRegister(m.Calls, m.Latency, m.Devices, m.Published, m.ScanErrs, m.ScanTime,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) observe(op string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.Calls.WithLabelValues(op, result).Inc()
	m.Latency.WithLabelValues(op).Observe(d.Seconds())
}

func (m *Metrics) observeScan(d time.Duration, err error, devices int) {
	m.ScanTime.Observe(d.Seconds())
	if err != nil {
		m.ScanErrs.Inc()
	}
	m.Devices.Set(float64(devices))
}
