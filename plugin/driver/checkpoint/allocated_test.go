package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

// TestAllocated: a group once with its members, a shared EFA once per
// share, an EFA alone once; in record order.
func TestAllocated(t *testing.T) {
	t.Parallel()
	d := func(req, dev, group, share string) checkpoint.PreparedDevice {
		return checkpoint.PreparedDevice{Request: req, Device: dev, Group: group, ShareID: share}
	}
	c := checkpoint.Claim{Devices: []checkpoint.PreparedDevice{
		d("gpu-efas", "efa-0", "group-0", ""), d("gpu-efas", "efa-1", "group-0", ""),
		d("one", "efa-2", "", ""),
		d("shared", "efa-3", "", "s1"), d("shared", "efa-3", "", "s2"),
	}}
	assert.Equal(t, []checkpoint.Allocated{
		{Name: "group-0", Request: "gpu-efas", EFAs: c.Devices[0:2]},
		{Name: "efa-2", Request: "one", EFAs: c.Devices[2:3]},
		{Name: "efa-3", ShareID: "s1", Request: "shared", EFAs: c.Devices[3:4]},
		{Name: "efa-3", ShareID: "s2", Request: "shared", EFAs: c.Devices[4:5]},
	}, c.Allocated())
	assert.Empty(t, checkpoint.Claim{}.Allocated())
}
