package driver_test

// Helpers several of the package's tests use.

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// node is the node the tests' plugins run on.
const node = "node-1"

var uverbsName = regexp.MustCompile(`\buverbs(\d+)\b`)

// renumbered is the p5 fixture after an efa or ib_uverbs module reload that
// gave the uverbs devices new numbers: uverbs<a> becomes uverbs<to[a]>,
// with its character device number, everywhere sysfs shows it.
func renumbered(t *testing.T, to map[int]int) *sysfs.MemFS {
	t.Helper()
	re := func(s string) string {
		return uverbsName.ReplaceAllStringFunc(s, func(m string) string {
			var n int
			fmt.Sscanf(m, "uverbs%d", &n)
			if v, ok := to[n]; ok {
				return fmt.Sprintf("uverbs%d", v)
			}
			return m
		})
	}
	return edit(t, func(e *sysfs.Entry) bool {
		old := e.Path
		e.Path, e.Target = re(e.Path), re(e.Target)
		if m := uverbsName.FindStringSubmatch(old); m != nil && filepath.Base(old) == "dev" {
			var n int
			fmt.Sscanf(m[1], "%d", &n)
			if v, ok := to[n]; ok {
				e.Data = []byte(fmt.Sprintf("231:%d\n", 192+v))
			}
		}
		return true
	})
}

// claimEntries is a claim's status.devices as the API holds them, keyed
// driver/device, with "/share" for a share.
func claimEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	got, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	require.NoError(t, err)
	out := map[string]resourceapi.AllocatedDeviceStatus{}
	for _, d := range got.Status.Devices {
		k := d.Driver + "/" + d.Device
		if d.ShareID != nil {
			k += "/" + *d.ShareID
		}
		out[k] = d
	}
	return out
}

// waitEntries waits until the claim has n entries and returns them.
func waitEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim, n int) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	require.Eventually(t, func() bool { return len(claimEntries(t, client, c)) == n }, 10*time.Second, 10*time.Millisecond,
		"claim %s: %d entries", c.Name, n)
	return claimEntries(t, client, c)
}

// entryCondition is the condition of type typ of an entry, without its
// transition time; the time apart.
func entryCondition(d resourceapi.AllocatedDeviceStatus, typ string) (claimstatus.Condition, time.Time) {
	for _, c := range d.Conditions {
		if c.Type == typ {
			return claimstatus.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}, c.LastTransitionTime.Time
		}
	}
	return claimstatus.Condition{}, time.Time{}
}

// series is one gathered sample.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

func gather(t *testing.T, g prometheus.Gatherer) []series {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var out []series
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{name: mf.GetName(), labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.value = m.GetGauge().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// find returns the samples of name whose labels include want.
func find(ss []series, name string, want map[string]string) []series {
	var out []series
	for _, s := range ss {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}
