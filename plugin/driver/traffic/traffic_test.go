package traffic_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/plugin/driver/traffic"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// reads are counter reads of EFAs by PCI address: each EFA's send_bytes
// and rdma_write_bytes on port 1.
type reads map[string][2]uint64

func (r reads) counters() map[string]*efa.Counters {
	out := map[string]*efa.Counters{}
	for pci, v := range r {
		out[pci] = &efa.Counters{Ports: map[int]map[string]uint64{1: {"send_bytes": v[0], "rdma_write_bytes": v[1], "tx_bytes": 999}}}
	}
	return out
}

func claim(uid string, devs ...traffic.Device) traffic.Claim {
	return traffic.Claim{UID: uid, Namespace: "ml", Name: "claim-" + uid, Devices: devs}
}

func efaDev(name, pci, rdma string) traffic.Device {
	return traffic.Device{Name: name, PCI: []string{pci}, RDMA: []string{rdma}}
}

func status(t *testing.T, tr *traffic.Tracker, uid, dev, share string, now time.Time) metav1.ConditionStatus {
	t.Helper()
	c, ok := tr.Condition(uid, dev, share, now)
	require.True(t, ok)
	assert.Equal(t, traffic.TypeTrafficSeen, c.Type)
	return c.Status
}

func TestIdleThenBusy(t *testing.T) {
	t.Parallel()
	tr, err := traffic.New(time.Minute, "")
	require.NoError(t, err)
	a := claim("a", efaDev("efa-1", "0000:10:00.0", "rdmap16s0"), efaDev("efa-2", "0000:20:00.0", "rdmap32s0"))
	cl := []traffic.Claim{a}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	ch, err := tr.Observe(at(0), cl, reads{"0000:10:00.0": {5, 5}, "0000:20:00.0": {7, 7}}.counters())
	require.NoError(t, err)
	assert.Empty(t, ch)
	assert.Equal(t, metav1.ConditionUnknown, status(t, tr, "a", "efa-1", "", at(0)), "not judged before a minute")

	// efa-2 moves at 30 s; efa-1 never does.
	ch, err = tr.Observe(at(30), cl, reads{"0000:10:00.0": {5, 5}, "0000:20:00.0": {7, 9}}.counters())
	require.NoError(t, err)
	assert.Empty(t, ch)
	assert.Equal(t, metav1.ConditionTrue, status(t, tr, "a", "efa-2", "", at(30)))

	ch, err = tr.Observe(at(60), cl, reads{"0000:10:00.0": {5, 5}, "0000:20:00.0": {7, 9}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1, "efa-1 idle a minute after it was first seen")
	assert.True(t, ch[0].Idle)
	assert.Equal(t, "efa-1", ch[0].Device.Name)
	assert.Equal(t, at(0), ch[0].Since)
	assert.Contains(t, ch[0].Message, "no RDMA traffic on EFA rdmap16s0 of claim ml/claim-a in the 1m0s since it was prepared")
	c, _ := tr.Condition("a", "efa-1", "", at(60))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, traffic.ReasonNoTraffic, c.Reason)
	assert.Contains(t, c.Message, "efakit doctor")
	assert.Equal(t, metav1.ConditionTrue, status(t, tr, "a", "efa-2", "", at(60)), "efa-2 moved 30 s ago")
	assert.Equal(t, 1, tr.IdleClaims())

	// efa-2 stands still a minute after its traffic: idle, since then.
	ch, err = tr.Observe(at(90), cl, reads{"0000:10:00.0": {5, 5}, "0000:20:00.0": {7, 9}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1)
	assert.Equal(t, "efa-2", ch[0].Device.Name)
	assert.Equal(t, at(30), ch[0].Since)
	c, _ = tr.Condition("a", "efa-2", "", at(90))
	assert.Contains(t, c.Message, "since 2026-12-06T12:00:30Z, over 1m0s")

	// efa-1's first traffic: busy, a change.
	ch, err = tr.Observe(at(100), cl, reads{"0000:10:00.0": {6, 5}, "0000:20:00.0": {7, 9}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1)
	assert.False(t, ch[0].Idle)
	assert.Equal(t, metav1.ConditionTrue, status(t, tr, "a", "efa-1", "", at(100)))
	assert.Equal(t, 1, tr.IdleClaims(), "efa-2 still idle")
}

// TestNotTraffic: what is no traffic: a counter that goes down (a driver
// reload), an EFA missing from a read, the port's own packet counters.
func TestNotTraffic(t *testing.T) {
	t.Parallel()
	tr, err := traffic.New(time.Minute, "")
	require.NoError(t, err)
	cl := []traffic.Claim{claim("a", efaDev("efa-1", "0000:10:00.0", "rdmap16s0"))}
	for i, r := range []reads{
		{"0000:10:00.0": {100, 100}},
		{"0000:10:00.0": {0, 0}}, // reloaded
		{},                       // not read
		{"0000:10:00.0": {0, 0}},
	} {
		ch, err := tr.Observe(t0.Add(time.Duration(i)*10*time.Second), cl, r.counters())
		require.NoError(t, err)
		assert.Empty(t, ch)
	}
	assert.Equal(t, metav1.ConditionUnknown, status(t, tr, "a", "efa-1", "", t0.Add(40*time.Second)))
	ch, err := tr.Observe(t0.Add(time.Minute), cl, reads{"0000:10:00.0": {0, 0}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1)
	assert.True(t, ch[0].Idle)
}

// TestClaimsApart: two claims of one pod, each judged on its own EFAs; a
// share of an EFA counts every claim sharing it, and says so.
func TestClaimsApart(t *testing.T) {
	t.Parallel()
	tr, err := traffic.New(time.Minute, "")
	require.NoError(t, err)
	shared := traffic.Device{Name: "efa-3", ShareID: "s1", PCI: []string{"0000:30:00.0"}, RDMA: []string{"rdmap48s0"}}
	cl := []traffic.Claim{claim("a", efaDev("efa-1", "0000:10:00.0", "rdmap16s0")), claim("b", efaDev("efa-2", "0000:20:00.0", "rdmap32s0")), claim("c", shared)}
	_, err = tr.Observe(t0, cl, reads{"0000:10:00.0": {1, 1}, "0000:20:00.0": {1, 1}, "0000:30:00.0": {1, 1}}.counters())
	require.NoError(t, err)
	ch, err := tr.Observe(t0.Add(time.Minute), cl, reads{"0000:10:00.0": {2, 1}, "0000:20:00.0": {1, 1}, "0000:30:00.0": {1, 1}}.counters())
	require.NoError(t, err)
	var idle []string
	for _, c := range ch {
		idle = append(idle, c.Claim.UID)
	}
	assert.ElementsMatch(t, []string{"b", "c"}, idle)
	assert.Equal(t, metav1.ConditionTrue, status(t, tr, "a", "efa-1", "", t0.Add(time.Minute)))
	c, _ := tr.Condition("c", "efa-3", "s1", t0.Add(time.Minute))
	assert.Contains(t, c.Message, "a shared EFA's counters count every claim sharing it")
	assert.Equal(t, 2, tr.IdleClaims())

	// A claim unprepared is forgotten.
	_, err = tr.Observe(t0.Add(90*time.Second), cl[:1], nil)
	require.NoError(t, err)
	_, ok := tr.Condition("b", "efa-2", "", t0.Add(2*time.Minute))
	assert.False(t, ok)
	assert.Equal(t, 0, tr.IdleClaims())
}

// TestRestart: a Tracker started again from its file keeps when each
// device was first seen, its last traffic and whether it was idle; the
// first read after the start is a baseline.
func TestRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "traffic.json")
	tr, err := traffic.New(time.Minute, path)
	require.NoError(t, err)
	cl := []traffic.Claim{claim("a", efaDev("efa-1", "0000:10:00.0", "rdmap16s0")), claim("b", efaDev("efa-2", "0000:20:00.0", "rdmap32s0"))}
	_, err = tr.Observe(t0, cl, reads{"0000:10:00.0": {1, 1}, "0000:20:00.0": {1, 1}}.counters())
	require.NoError(t, err)
	ch, err := tr.Observe(t0.Add(time.Minute), cl, reads{"0000:10:00.0": {1, 1}, "0000:20:00.0": {2, 1}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1, "a idle, b busy")

	again, err := traffic.New(time.Minute, path)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, status(t, again, "a", "efa-1", "", t0.Add(time.Minute)), "still idle")
	assert.Equal(t, metav1.ConditionTrue, status(t, again, "b", "efa-2", "", t0.Add(time.Minute)), "still busy")
	// The first read after the start: a baseline, however high.
	ch, err = again.Observe(t0.Add(70*time.Second), cl, reads{"0000:10:00.0": {50, 50}, "0000:20:00.0": {50, 50}}.counters())
	require.NoError(t, err)
	assert.Empty(t, ch)
	// b goes idle a minute after its last traffic, which the file kept.
	ch, err = again.Observe(t0.Add(2*time.Minute), cl, reads{"0000:10:00.0": {50, 50}, "0000:20:00.0": {50, 50}}.counters())
	require.NoError(t, err)
	require.Len(t, ch, 1)
	assert.Equal(t, "b", ch[0].Claim.UID)
	assert.Equal(t, t0.Add(time.Minute), ch[0].Since)

	require.NoError(t, os.WriteFile(path, []byte("{"), 0o644))
	broken, err := traffic.New(time.Minute, path)
	assert.Error(t, err, "a damaged file is said")
	require.NotNil(t, broken, "and the tracker starts empty")
}

func TestOff(t *testing.T) {
	t.Parallel()
	tr, err := traffic.New(0, "")
	require.NoError(t, err)
	ch, err := tr.Observe(t0, []traffic.Claim{claim("a", efaDev("efa-1", "0000:10:00.0", "rdmap16s0"))}, nil)
	require.NoError(t, err)
	assert.Empty(t, ch)
	_, ok := tr.Condition("a", "efa-1", "", t0)
	assert.False(t, ok, "--idle-after=0: no condition")
}
