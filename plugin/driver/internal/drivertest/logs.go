package drivertest

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// Logger is a context whose logger keeps every line at the default
// verbosity, and the lines kept so far.
func Logger(t *testing.T) (context.Context, func() []ktesting.LogEntry) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func() []ktesting.LogEntry {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().Data()
	}
}

// KV is a log entry's key/value pairs as a map.
func KV(e ktesting.LogEntry) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
		out[fmt.Sprint(e.ParameterKVList[i])] = e.ParameterKVList[i+1]
	}
	return out
}

// Entries are the log's lines with message msg.
func Entries(log []ktesting.LogEntry, msg string) []ktesting.LogEntry {
	var out []ktesting.LogEntry
	for _, e := range log {
		if e.Message == msg {
			out = append(out, e)
		}
	}
	return out
}
