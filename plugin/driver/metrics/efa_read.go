package metrics

import (
	"errors"
	"slices"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa"
)

// read reads one EFA's counters and its ports' state and rate.
func (m *EFA) read(t Target) efaReading {
	rd := efaReading{t: t}
	cs, err := t.Dev.ReadCounters(m.sysfs)
	rd.counters = cs
	rd.errs = append(rd.errs, flatten(err)...)
	for _, p := range t.Dev.Ports {
		l, err := t.Dev.ReadPortLink(m.sysfs, p.Number)
		rd.errs = append(rd.errs, flatten(err)...)
		pr := portReading{number: p.Number, state: l.State, stateOK: l.StateOK, rateGbps: l.RateGbps, rateOK: l.RateOK}
		rd.ports = append(rd.ports, pr)
	}
	return rd
}

// flatten lists the errors a join holds.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// noteErrors counts a reading's errors and logs them when they differ
// from the EFA's last (a damaged file is not logged on every scrape).
func (m *EFA) noteErrors(logger klog.Logger, rd efaReading) {
	dev := rd.t.Device
	if n := len(rd.errs); n > 0 {
		m.fails.reads.WithLabelValues(dev).Add(float64(n))
	}
	msg := errors.Join(rd.errs...)
	text := ""
	if msg != nil {
		text = msg.Error()
	}
	m.mu.Lock()
	changed := m.lastErr[dev] != text
	if text == "" {
		delete(m.lastErr, dev)
	} else {
		m.lastErr[dev] = text
	}
	m.mu.Unlock()
	switch {
	case changed && text != "":
		logger.Error(msg, "EFA metrics left files out", "device", dev)
	case changed:
		logger.Info("EFA metrics read every file again", "device", dev)
	}
}

// metricsOf turns a reading into metrics. A counter that could not be
// read is absent: the reading holds no value for it.
func (m *EFA) metricsOf(rd efaReading) []prometheus.Metric {
	var out []prometheus.Metric
	known := map[string]bool{} // counter name -> per port
	for _, c := range efa.KnownCounters() {
		known[c.Name] = c.Port
	}
	base := rd.t.labelValues()
	basePairs := labelPairs(efaLabels, base)
	portPairs := map[int][]*dto.LabelPair{}
	pairsOf := func(port int) ([]string, []*dto.LabelPair) {
		pl := append(slices.Clone(base), strconv.Itoa(port))
		if portPairs[port] == nil {
			portPairs[port] = labelPairs(append(slices.Clone(efaLabels), "port"), pl)
		}
		return pl, portPairs[port]
	}
	if cs := rd.counters; cs != nil {
		for _, name := range sortedKeys(cs.Device) {
			v := float64(cs.Device[name])
			if port, ok := known[name]; ok && !port && m.descs.counters[name] != nil {
				out = append(out, &efaMetric{m.descs.counters[name], basePairs, true, v})
			} else {
				out = append(out, prometheus.MustNewConstMetric(m.descs.otherDevice, prometheus.CounterValue, v, append(slices.Clone(base), name)...))
			}
		}
		ports := make([]int, 0, len(cs.Ports))
		for n := range cs.Ports {
			ports = append(ports, n)
		}
		sort.Ints(ports)
		for _, n := range ports {
			pl, pairs := pairsOf(n)
			for _, name := range sortedKeys(cs.Ports[n]) {
				v := float64(cs.Ports[n][name])
				if port, ok := known[name]; ok && port && m.descs.counters[name] != nil {
					out = append(out, &efaMetric{m.descs.counters[name], pairs, true, v})
				} else {
					out = append(out, prometheus.MustNewConstMetric(m.descs.otherPort, prometheus.CounterValue, v, append(slices.Clone(pl), name)...))
				}
			}
		}
	}
	for _, p := range rd.ports {
		_, pairs := pairsOf(p.number)
		if p.stateOK {
			active := 0.0
			if p.state == "ACTIVE" {
				active = 1
			}
			out = append(out, &efaMetric{m.descs.portActive, pairs, false, active})
		}
		if p.rateOK {
			out = append(out, &efaMetric{m.descs.portRate, pairs, false, p.rateGbps * 1e9 / 8})
		}
	}
	return out
}

// efaMetric is one sample of an EFA. Its label pairs, sorted by name as
// the registry wants them, are built once per EFA and port and shared by
// all of its samples (read-only), where prometheus.MustNewConstMetric
// builds them for each: a third of a scrape's allocations on a p5.
type efaMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	counter bool
	value   float64
}

func (e *efaMetric) Desc() *prometheus.Desc { return e.desc }

func (e *efaMetric) Write(out *dto.Metric) error {
	out.Label = e.labels
	v := e.value
	if e.counter {
		out.Counter = &dto.Counter{Value: &v}
	} else {
		out.Gauge = &dto.Gauge{Value: &v}
	}
	return nil
}

// labelPairs pairs names with values, sorted by name.
func labelPairs(names, values []string) []*dto.LabelPair {
	out := make([]*dto.LabelPair, len(names))
	for i := range names {
		out[i] = &dto.LabelPair{Name: &names[i], Value: &values[i]}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
