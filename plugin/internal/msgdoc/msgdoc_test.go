package msgdoc

import (
	"flag"
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/events"
)

var update = flag.Bool("update", false, "rewrite docs/messages.md")

// reasons are the Event reasons of driver/events by constant name.
var reasons = map[string]string{
	"ReasonStandingAside": events.ReasonStandingAside, "ReasonPublishing": events.ReasonPublishing,
	"ReasonUnhealthy": events.ReasonUnhealthy, "ReasonDegraded": events.ReasonDegraded,
	"ReasonHealthy": events.ReasonHealthy, "ReasonPublishFailed": events.ReasonPublishFailed,
	"ReasonRenumbered": events.ReasonRenumbered, "ReasonStorage": events.ReasonStorage,
	"ReasonNoTraffic": events.ReasonNoTraffic, "ReasonTraffic": events.ReasonTraffic,
}

// TestMessagesDoc: docs/messages.md lists exactly the Events and log
// messages of the plugin's code, and every reason of driver/events is
// written somewhere.
func TestMessagesDoc(t *testing.T) {
	logs, evs, err := Scan(os.DirFS("../.."), []string{"driver", "cmd/efakit-plugin"}, reasons)
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	written := map[string]bool{}
	for _, e := range evs {
		written[e.Reason] = true
	}
	for name, r := range reasons {
		assert.True(t, written[r], "%s (%s) is written nowhere", name, r)
	}
	want := Page(logs, evs)
	if *update {
		require.NoError(t, os.WriteFile("../../../docs/messages.md", []byte(want), 0o644))
	}
	got, err := os.ReadFile("../../../docs/messages.md")
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "run go test ./internal/msgdoc -update")
}

func TestScan(t *testing.T) {
	src := `package p

func f() {
	logger.Info("Published", "devices", 3)
	logger.V(4).Info("Graded")
	logger.Error(err, "Rescan failed")
	logger.Info("lower case is not a message")
	r.Record(corev1.EventTypeWarning, events.ReasonUnhealthy, dev, "EFA "+name+" is unhealthy")
	r.Record(corev1.EventTypeNormal, events.ReasonHealthy, "", fmt.Sprintf("%s is healthy again", x))
}
`
	logs, evs, err := Scan(fstest.MapFS{"d/p.go": {Data: []byte(src)}, "d/p_test.go": {Data: []byte(`package p; func g() { l.Info("Test") }`)}},
		[]string{"d"}, map[string]string{"ReasonUnhealthy": "EFAUnhealthy", "ReasonHealthy": "EFAHealthy"})
	require.NoError(t, err)
	assert.Equal(t, []Log{{"Graded", false, "d"}, {"Published", false, "d"}, {"Rescan failed", true, "d"}}, logs)
	assert.Equal(t, []Event{{"EFAHealthy", "Normal", "d", ""}, {"EFAUnhealthy", "Warning", "d", "EFA "}}, evs)
}
