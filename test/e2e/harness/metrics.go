package harness

import (
	"io"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricsSnapshot is every sample by metric name.
type MetricsSnapshot map[string][]sample

type sample struct {
	Labels map[string]string
	Value  float64
}

// ParseMetrics reads Prometheus text: every sample by metric name, a
// histogram's or summary's as its _sum and _count. The e2e's one parser of /metrics.
func ParseMetrics(r io.Reader) (MetricsSnapshot, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := MetricsSnapshot{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				out[name+"_sum"] = append(out[name+"_sum"], sample{labels, h.GetSampleSum()})
				out[name+"_count"] = append(out[name+"_count"], sample{labels, float64(h.GetSampleCount())})
			case m.GetSummary() != nil:
				sm := m.GetSummary()
				out[name+"_sum"] = append(out[name+"_sum"], sample{labels, sm.GetSampleSum()})
				out[name+"_count"] = append(out[name+"_count"], sample{labels, float64(sm.GetSampleCount())})
			case m.GetCounter() != nil:
				out[name] = append(out[name], sample{labels, m.GetCounter().GetValue()})
			case m.GetGauge() != nil:
				out[name] = append(out[name], sample{labels, m.GetGauge().GetValue()})
			case m.GetUntyped() != nil:
				out[name] = append(out[name], sample{labels, m.GetUntyped().GetValue()})
			}
		}
	}
	return out, nil
}

// Value sums the samples of a metric whose labels include match.
func (m MetricsSnapshot) Value(name string, match map[string]string) float64 {
	sum := 0.0
	for _, s := range m[name] {
		ok := true
		for k, v := range match {
			ok = ok && s.Labels[k] == v
		}
		if ok {
			sum += s.Value
		}
	}
	return sum
}
