package drivertest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Series is one gathered sample: a counter's or gauge's value.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Gather reads every sample of g.
func Gather(t testing.TB, g prometheus.Gatherer) []Series {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var out []Series
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := Series{Name: mf.GetName(), Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.Value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.Value = m.GetGauge().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// Find returns the samples of name whose labels include want.
func Find(ss []Series, name string, want map[string]string) []Series {
	var out []Series
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// One is the value of the one sample of name with labels want.
func One(t testing.TB, ss []Series, name string, want map[string]string) float64 {
	t.Helper()
	f := Find(ss, name, want)
	require.Len(t, f, 1, "%s%v", name, want)
	return f[0].Value
}
