package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/traffic"
	"github.com/efakit/efakit/test/e2e/harness"
)

// claimEvents are the messages of the Events of a reason about a
// ResourceClaim.
func (n *realNode) claimEvents(claim, reason string) []string {
	return n.eventMessages(harness.NodeNS, "involvedObject.kind=ResourceClaim,involvedObject.name="+claim+",reason="+reason)
}

// TestRealNodeTraffic: a pod holds two claims, one of two EFAs and one of
// one, with a short --idle-after. The pair's counters stand still: both
// its entries turn TrafficSeen False (NoTraffic), an Event goes on its
// claim and efakit_plugin_idle_claims counts it; the single EFA's
// counters move meanwhile, and its claim stays True. One of the pair then
// carries traffic: its entry turns True, its twin stays False. A restarted
// plugin keeps each entry's state.
func TestRealNodeTraffic(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	n := startRealNode(t, c)
	n.EnsureNamespace()
	const idleAfter = 6 * time.Second
	values := []string{"--set", "healthInterval=1s", "--set", "idleAfter=" + idleAfter.String()}
	n.StartEFAKit(p5Fixture, values...)
	n.WaitEFAs(t, 32)
	harness.CreateSeed(t, c, "seed-claims.yaml")
	ctx := context.Background()
	two := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "two-efas", Namespace: harness.NodeNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "efas", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: resources.DefaultDeviceClass, Count: 2}}}}}}}
	_, err := c.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(ctx, two, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))

	_, claims := n.run(t, n.PrinterPod("traffic", harness.TemplateClaim("pair", "two-efas"), harness.TemplateClaim("one", "single-efa-claim")))
	pair, one := claims["pair"].Name, claims["one"].Name
	n.waitEntries(t, pair, 2)
	n.waitEntries(t, one, 1)
	published := n.PublishedEFAs(t)
	addrOf := func(dev string) string { return *published[dev].Attributes[resources.AttrPCIAddr].StringValue }
	pairDevs := allocated(resources.DefaultDriverName, claims["pair"])
	oneDev := allocated(resources.DefaultDriverName, claims["one"])[0]
	require.Len(t, pairDevs, 2)

	trafficOf := func(claim string) map[string]metav1.Condition {
		out := map[string]metav1.Condition{}
		for dev, e := range n.statusEntries(t, claim) {
			out[dev] = conditionOf(e, traffic.TypeTrafficSeen)
		}
		return out
	}
	statusIs := func(claim string, want map[string]metav1.ConditionStatus) func() bool {
		return func() bool {
			got := trafficOf(claim)
			for dev, s := range want {
				if got[dev].Status != s {
					return false
				}
			}
			return true
		}
	}
	views := func() string {
		var b strings.Builder
		for _, cl := range []string{pair, one} {
			conds := trafficOf(cl)
			y, err := yaml.Marshal(conds)
			require.NoError(t, err)
			fmt.Fprintf(&b, "--- claim %s, TrafficSeen by device:\n%s", cl, y)
		}
		fmt.Fprintf(&b, "--- efakit_plugin_idle_claims: %v\n", n.scrape(t, "efakit_plugin_idle_claims"))
		return b.String()
	}

	// Prepared and not yet judged, from the first health check on.
	harness.Eventually(t, statusIs(pair, map[string]metav1.ConditionStatus{pairDevs[0]: metav1.ConditionUnknown, pairDevs[1]: metav1.ConditionUnknown}),
		idleAfter-time.Second, 50*time.Millisecond, views)
	assert.Equal(t, traffic.ReasonWaiting, trafficOf(pair)[pairDevs[0]].Reason)
	// The single EFA carries traffic, the pair nothing.
	stop := keepAdvancing(t, n.counterFile(t, p5Fixture, addrOf(oneDev), "ports/1/hw_counters/send_bytes"), 4096, time.Second)
	defer stop()
	start := time.Now()
	harness.Eventually(t, statusIs(pair, map[string]metav1.ConditionStatus{pairDevs[0]: metav1.ConditionFalse, pairDevs[1]: metav1.ConditionFalse}),
		idleAfter+30*time.Second, 100*time.Millisecond, func() string { return views() + n.LogTail("efakit-plugin", 3000) })
	t.Logf("the pair idle %s after the counters stood still (--idle-after %s):\n%s", time.Since(start).Round(100*time.Millisecond), idleAfter, views())
	harness.Eventually(t, statusIs(one, map[string]metav1.ConditionStatus{oneDev: metav1.ConditionTrue}), 30*time.Second, 100*time.Millisecond, views)
	idle := trafficOf(pair)[pairDevs[0]]
	assert.Equal(t, traffic.ReasonNoTraffic, idle.Reason)
	assert.Contains(t, idle.Message, "no RDMA traffic on EFA ")
	assert.Contains(t, idle.Message, "efakit doctor")
	harness.Eventually(t, func() bool { return len(n.claimEvents(pair, events.ReasonNoTraffic)) == 2 }, 30*time.Second, 200*time.Millisecond,
		func() string { return fmt.Sprint(n.claimEvents(pair, events.ReasonNoTraffic)) })
	assert.Empty(t, n.claimEvents(one, events.ReasonNoTraffic), "the busy claim is judged on its own")
	assert.Equal(t, []map[string]string{{"": "1"}}, n.scrape(t, "efakit_plugin_idle_claims"), "one claim idle")

	// One of the pair carries traffic: its entry turns True, an Event
	// says so; its twin stays idle.
	advance(t, n.counterFile(t, p5Fixture, addrOf(pairDevs[0]), "ports/1/hw_counters/rdma_write_bytes"), 1<<20)
	harness.Eventually(t, statusIs(pair, map[string]metav1.ConditionStatus{pairDevs[0]: metav1.ConditionTrue, pairDevs[1]: metav1.ConditionFalse}),
		30*time.Second, 100*time.Millisecond, views)
	harness.Eventually(t, func() bool { return len(n.claimEvents(pair, events.ReasonTraffic)) == 1 }, 30*time.Second, 200*time.Millisecond,
		func() string { return fmt.Sprint(n.claimEvents(pair, events.ReasonTraffic)) })
	before := trafficOf(pair)

	// A restarted plugin keeps what it had: the idle entry's condition
	// does not move (its transition time neither), nor the busy ones'.
	n.KillEFAKit(syscall.SIGTERM)
	n.StartEFAKit(p5Fixture, values...)
	n.WaitEFAs(t, 32)
	time.Sleep(3 * time.Second) // three health checks of the new plugin
	after := trafficOf(pair)
	for _, dev := range pairDevs {
		assert.Equal(t, before[dev].Status, after[dev].Status, "%s after the restart", dev)
		assert.Equal(t, before[dev].LastTransitionTime, after[dev].LastTransitionTime, "%s after the restart", dev)
	}
	assert.Equal(t, metav1.ConditionTrue, trafficOf(one)[oneDev].Status)
	assert.Len(t, n.claimEvents(pair, events.ReasonNoTraffic), 2, "no second Event for the same idle time")
	t.Logf("after the restart:\n%s", views())
	n.deletePod(t, "traffic")
}
