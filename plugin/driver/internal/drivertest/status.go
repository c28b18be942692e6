package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/plugin/driver/claimstatus"
)

// ClaimEntries is a claim's status.devices as the API holds them, keyed
// driver/device, with "/share" for a share.
func ClaimEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim) map[string]resourceapi.AllocatedDeviceStatus {
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

// WaitEntries waits until the claim has n entries and returns them.
func WaitEntries(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim, n int) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	require.Eventually(t, func() bool { return len(ClaimEntries(t, client, c)) == n }, 10*time.Second, 10*time.Millisecond,
		"claim %s: %d entries", c.Name, n)
	return ClaimEntries(t, client, c)
}

// EntryCondition is the condition of type typ of an entry, without its
// transition time; the time apart.
func EntryCondition(d resourceapi.AllocatedDeviceStatus, typ string) (claimstatus.Condition, time.Time) {
	for _, c := range d.Conditions {
		if c.Type == typ {
			return claimstatus.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}, c.LastTransitionTime.Time
		}
	}
	return claimstatus.Condition{}, time.Time{}
}
