package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	efaevents "github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/test/e2e/harness"
)

// An efa module reload, as sysfs shows it to a reader, in the plugin's
// unpacked tree of a fixture: every EFA's counter files vanish (the
// module is out), then each EFA's uverbs device comes back under another
// number and its counters come back at 0. Each step is atomic for each
// EFA: a reader sees an EFA with its old uverbs device or its new one,
// never none, and its counter directory whole or not at all.

// counterDirs lists every hw_counters directory of the EFAs (the
// device's and each port's) in the tree of fixture.
func (n *realNode) counterDirs(t *testing.T, fixture string) []string {
	t.Helper()
	var dirs []string
	require.NoError(t, filepath.WalkDir(n.Unpack(fixture), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "hw_counters" && strings.Contains(p, "/infiniband/") {
			dirs = append(dirs, p)
			return filepath.SkipDir
		}
		return err
	}))
	require.NotEmpty(t, dirs)
	return dirs
}

// hideCounters moves every EFA's counter directories away, as an
// unloaded module takes them.
func (n *realNode) hideCounters(t *testing.T, fixture string) {
	t.Helper()
	for _, d := range n.counterDirs(t, fixture) {
		require.NoError(t, os.Rename(d, filepath.Join(filepath.Dir(d), ".unloaded-hw_counters")))
	}
}

// countersBackAtZero gives every EFA its counter directories again, each
// counter 0, as the reloaded module starts them.
func (n *realNode) countersBackAtZero(t *testing.T, fixture string) {
	t.Helper()
	var gone []string
	require.NoError(t, filepath.WalkDir(n.Unpack(fixture), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == ".unloaded-hw_counters" {
			gone = append(gone, p)
			return filepath.SkipDir
		}
		return err
	}))
	require.NotEmpty(t, gone)
	for _, g := range gone {
		ents, err := os.ReadDir(g)
		require.NoError(t, err)
		fresh := filepath.Join(filepath.Dir(g), ".reloaded-hw_counters")
		require.NoError(t, os.Mkdir(fresh, 0o755))
		for _, e := range ents {
			require.NoError(t, os.WriteFile(filepath.Join(fresh, e.Name()), []byte("0\n"), 0o644))
		}
		require.NoError(t, os.Rename(fresh, filepath.Join(filepath.Dir(g), "hw_counters")))
		require.NoError(t, os.RemoveAll(g))
	}
}

// renumberFresh gives every uverbs device uverbs<N> the number N+by (and
// the character device 231:192+N+by), numbers no device had: the new
// device directory is made whole beside the old one under a name no
// reader takes for a uverbs device, renamed into place, and only then is
// the old one taken away. It returns each EFA's new number by its old.
func (n *realNode) renumberFresh(t *testing.T, fixture string, by int) map[int]int {
	t.Helper()
	root := n.Unpack(fixture)
	var dirs []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if m := uverbsIn.FindString(d.Name()); err == nil && d.IsDir() && filepath.Base(filepath.Dir(p)) == "infiniband_verbs" && m == d.Name() {
			dirs = append(dirs, p)
			return filepath.SkipDir
		}
		return err
	}))
	require.NotEmpty(t, dirs)
	to := map[int]int{}
	for _, old := range dirs {
		num, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(old), "uverbs"))
		require.NoError(t, err)
		to[num] = num + by
		parent := filepath.Dir(old)
		fresh := filepath.Join(parent, fmt.Sprintf(".reloaded-uverbs%d", num+by))
		require.NoError(t, os.Mkdir(fresh, 0o755))
		ents, err := os.ReadDir(old)
		require.NoError(t, err)
		for _, e := range ents {
			from, into := filepath.Join(old, e.Name()), filepath.Join(fresh, e.Name())
			if target, err := os.Readlink(from); err == nil {
				require.NoError(t, os.Symlink(target, into))
				continue
			}
			b, err := os.ReadFile(from)
			require.NoError(t, err)
			if e.Name() == "dev" {
				b = fmt.Appendf(nil, "231:%d\n", 192+num+by)
			}
			require.NoError(t, os.WriteFile(into, b, 0o644))
		}
		next := filepath.Join(parent, fmt.Sprintf("uverbs%d", num+by))
		require.NoError(t, os.Rename(fresh, next))
		gone := filepath.Join(parent, fmt.Sprintf(".unloaded-uverbs%d", num))
		require.NoError(t, os.Rename(old, gone))
		require.NoError(t, os.RemoveAll(gone))
		// The class's link follows.
		class := filepath.Join(root, "class", "infiniband_verbs")
		rel, err := filepath.Rel(class, next)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(rel, filepath.Join(class, fmt.Sprintf("uverbs%d", num+by))))
		require.NoError(t, os.Remove(filepath.Join(class, fmt.Sprintf("uverbs%d", num))))
	}
	return to
}

// impossibleCount is a rule's count no EFA reaches in a window (a
// difference that wrapped around 2^64), in a message ("18446744073709551613
// admin commands without completion") or in the checks' log
// ("admin-timeouts":18446744073709551613).
var impossibleCount = regexp.MustCompile(`\b\d{11,} (admin commands|retransmit timeouts|unresponsive remotes|impaired connections|failed RDMA)|[a-z-]+"?:\s*\d{11,}`)

// checkDriverReload reloads the efa module (as sysfs shows it) under the
// running pod, whose claim holds the EFAs of results: the counter files
// vanish for at least two health checks, every uverbs device comes back
// under a new number and every counter at 0. Through the health checks
// that follow, no EFA is tainted, no Event grades one or gives an
// impossible count, the pod runs on, and its claim keeps its EFAs, its
// spec following the new numbers; the container, restarted, gets them.
func (n *realNode) checkDriverReload(t *testing.T, pod, claim string, results []resourceapi.DeviceRequestAllocationResult) {
	ctx := context.Background()
	scans := func() int {
		for _, m := range n.scrape(t, "efakit_plugin_scan_seconds_count") {
			v, err := strconv.ParseFloat(m[""], 64)
			require.NoError(t, err)
			return int(v)
		}
		return 0
	}
	events := func() map[string]corev1.Event {
		l, err := n.CP.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n.Name})
		require.NoError(t, err)
		out := map[string]corev1.Event{}
		for _, e := range l.Items {
			out[e.Name] = e
		}
		return out
	}
	// taints are the taints seen on any EFA, with when first seen.
	taints := map[string]string{}
	// watch checks every EFA's taints until cond holds.
	watch := func(what string, cond func() bool) {
		t.Helper()
		harness.Eventually(t, func() bool {
			for name, d := range n.PublishedEFAs(t) {
				for _, tt := range d.Taints {
					k := fmt.Sprintf("%s: %s=%s:%s", name, tt.Key, tt.Value, tt.Effect)
					if taints[k] == "" {
						taints[k] = time.Now().Format("15:04:05.000")
					}
				}
			}
			return cond()
		}, 90*time.Second, 100*time.Millisecond, func() string { return what + "; plugin:\n" + n.LogTail("efakit-plugin", 4000) })
	}
	printed, _ := n.waitPrinted(t, pod)
	_, restarts := n.containerID(t, pod)
	before := events()

	start, first := time.Now(), scans()
	n.hideCounters(t, p5Fixture)
	watch("two health checks without counters", func() bool { return scans() >= first+3 })
	gap := time.Since(start)
	to := n.renumberFresh(t, p5Fixture, 32)
	n.countersBackAtZero(t, p5Fixture)
	back, after := time.Now(), scans()
	var renumbered time.Duration
	watch("the renumbering seen and eight health checks after the counters came back", func() bool {
		if renumbered == 0 {
			for _, m := range n.nodeEvents(efaevents.ReasonRenumbered) {
				if strings.Contains(m, "EFAs of claim "+harness.NodeNS+"/"+claim+" renumbered") {
					renumbered = time.Since(back)
				}
			}
		}
		return renumbered > 0 && scans() >= after+8
	})
	t.Logf("counter files gone for %s (%d health checks), back at 0 with every uverbs device renumbered (+32): the claim's renumbering Event %s later; %d health checks since",
		gap.Round(time.Millisecond), after-first, renumbered.Round(time.Millisecond), scans()-after)

	assert.Empty(t, taints, "no EFA tainted through the reload")
	for name, e := range events() {
		assert.NotRegexp(t, impossibleCount, e.Message, "Event %s", name)
		if e.Reason != efaevents.ReasonUnhealthy && e.Reason != efaevents.ReasonDegraded {
			continue
		}
		if old, ok := before[name]; !ok || old.Count != e.Count {
			t.Errorf("an EFA graded through the reload: %s %s", e.Reason, e.Message)
		}
	}
	assert.Empty(t, n.scrape(t, "efakit_plugin_device_health"), "every EFA healthy")
	assert.NotRegexp(t, impossibleCount, n.PluginLog())

	// The pod ran on; its claim keeps its EFAs, under their new numbers.
	p, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodRunning, p.Status.Phase)
	_, now := n.containerID(t, pod)
	assert.Equal(t, restarts, now, "no restart through the reload")
	cl, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, claim, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, results, cl.Status.Allocation.Devices.Results, "the claim keeps its EFAs")
	var want []string
	for _, l := range printed.Nodes {
		var num int
		_, err := fmt.Sscanf(strings.Fields(l)[0], "/dev/infiniband/uverbs%d", &num)
		require.NoError(t, err)
		want = append(want, fmt.Sprintf("/dev/infiniband/uverbs%d 231:%d", to[num], 192+to[num]))
	}
	sort.Strings(want)
	harness.Eventually(t, func() bool {
		var got []string
		for _, e := range n.statusEntries(t, claim) {
			d := dataOf(t, e)
			got = append(got, d.UverbsNode+" "+d.DeviceNumber)
		}
		sort.Strings(got)
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, 30*time.Second, 200*time.Millisecond, func() string { return "the claim's status names the new numbers:\n" + n.claimYAML(t, claim) })

	// The container restarts: it gets its EFAs under their new numbers.
	id, _ := n.containerID(t, pod)
	n.killContainer(t, id)
	n.waitRestarted(t, pod, restarts)
	again, _ := n.waitPrinted(t, pod)
	assert.Equal(t, want, again.Nodes, "the restarted container holds its EFAs' new numbers")
	t.Logf("restarted container: %v (was %v)", again.Nodes, printed.Nodes)
}
