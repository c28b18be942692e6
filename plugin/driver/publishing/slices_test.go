package publishing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/plugin/driver/publishing"
)

// TestJitteredRepairDelay: every delay is in [RepairDelay,
// RepairDelay+RepairJitter), and a fleet's delays are spread over that
// range, not all one value.
func TestJitteredRepairDelay(t *testing.T) {
	seen := map[time.Duration]bool{}
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := publishing.JitteredRepairDelay()
		require.GreaterOrEqual(t, d, publishing.RepairDelay)
		require.Less(t, d, publishing.RepairDelay+publishing.RepairJitter)
		seen[d] = true
		lo, hi = min(lo, d), max(hi, d)
	}
	assert.Greater(t, len(seen), 900, "distinct delays of 1,000 draws")
	// 1,000 uniform draws leave less than a tenth of the range uncovered
	// at either end with probability 1 - 2*0.9^1000.
	assert.Less(t, lo, publishing.RepairDelay+publishing.RepairJitter/10)
	assert.Greater(t, hi, publishing.RepairDelay+publishing.RepairJitter*9/10)
}

// TestCurrent: Current gives the node's slices as the watch holds them,
// and says it cannot tell before the watch started or listed.
func TestCurrent(t *testing.T) {
	node := "node-1"
	other := "node-2"
	mk := func(name string, n *string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: "dra.net", NodeName: n, Pool: resourceapi.ResourcePool{Name: *n, ResourceSliceCount: 1}}}
	}
	client := fake.NewClientset(mk("a", &node), mk("b", &other))
	s := &publishing.Slices{Client: client, DriverName: "dra.net", NodeName: node}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Current(ctx)
	require.ErrorContains(t, err, "has not started")

	go s.Watch(ctx, func() {})()
	got, err := s.Current(ctx)
	require.NoError(t, err)
	// The fake client ignores field selectors: the watch holds both, as
	// ForeignSlices (which skips other nodes) expects.
	var names []string
	for _, sl := range got {
		names = append(names, sl.Name)
	}
	assert.Contains(t, names, "a")

	_, err = client.ResourceV1().ResourceSlices().Create(ctx, mk("c", &node), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := s.Current(ctx)
		if err != nil {
			return false
		}
		for _, sl := range got {
			if sl.Name == "c" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "a new slice reaches Current through the watch")

	expired, stop := context.WithCancel(context.Background())
	stop()
	unsynced := &publishing.Slices{Client: fake.NewClientset(), DriverName: "dra.net", NodeName: node}
	go unsynced.Watch(expired, func() {})()
	_, err = unsynced.Current(expired)
	assert.ErrorContains(t, err, "the watch of the node's slices has not listed yet")
}
