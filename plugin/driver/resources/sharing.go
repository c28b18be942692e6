package resources

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// SharingMode says whether several claims may share one EFA.
type SharingMode string

// The sharing modes.
const (
	// SharingNone publishes every EFA for one claim at a time (the
	// default): a claim shared by several pods is the only way to share.
	SharingNone SharingMode = ""
	// SharingCapacity publishes every single EFA with
	// allowMultipleAllocations and a capacity of Config.Shares shares
	// (CapacityShares): independent claims each take a share (one unless
	// they ask for more), and the scheduler never gives an EFA more shares
	// than it has. Needs the API server's and the scheduler's
	// DRAConsumableCapacity (beta, on by default since Kubernetes 1.36).
	SharingCapacity SharingMode = "capacity"
)

// ParseSharingMode parses the --sharing flag: none or capacity.
func ParseSharingMode(s string) (SharingMode, error) {
	switch s {
	case "", "none":
		return SharingNone, nil
	case "capacity":
		return SharingCapacity, nil
	}
	return "", fmt.Errorf("unknown sharing mode %q (none, capacity)", s)
}

// CapacityShares is the capacity a shared EFA publishes: how many claims
// may hold it at once, each taking one share unless its request asks for
// more (capacity.requests: {shares: N}; N of N is the whole EFA). An EFA
// enforces no bandwidth or queue split between the processes that open
// it, so a share count is what the scheduler can keep true; a bandwidth
// capacity would promise a division nothing makes.
const CapacityShares = resourceapi.QualifiedName("shares")

// DefaultShares is the share count of an EFA when Config.Shares is 0:
// eight, so that one inference replica per GPU of an eight-GPU node fits
// on a node with a single EFA, and a p5's 32 EFAs hold 256 claims.
const DefaultShares = 8

// MaxShares bounds Config.Shares: the API bounds no capacity, but a share
// count past the claims a node runs (its pods, 110 by default) says
// nothing more, and a small number keeps the request policy's range easy
// to read.
const MaxShares = 1024

// shares is the share count of cfg.
func (c Config) shares() int64 {
	if c.Shares == 0 {
		return DefaultShares
	}
	return c.Shares
}

// CheckSharing checks a configuration's sharing: a known mode, a share
// count of 1 to MaxShares, and single EFAs only (a group device stands
// for every EFA of a root, which a share of it would not).
func (c Config) CheckSharing() error {
	switch c.Sharing {
	case SharingNone:
		return nil
	case SharingCapacity:
	default:
		return fmt.Errorf("unknown sharing mode %q (none, capacity)", c.Sharing)
	}
	if n := c.shares(); n < 1 || n > MaxShares {
		return fmt.Errorf("%d shares per EFA: want 1 to %d", n, MaxShares)
	}
	if c.Groups != GroupsNone {
		return fmt.Errorf("sharing %q needs group mode none, not %q: a group device stands for every EFA of a PCIe root, which a share does not take", c.Sharing, c.Groups)
	}
	return nil
}

// shareable makes a published EFA shareable by capacity: several claims
// may be allocated it, each consuming shares of CapacityShares (one by
// default, 1 to all of them on request).
func shareable(d *resourceapi.Device, n int64) {
	yes := true
	q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }
	d.AllowMultipleAllocations = &yes
	if d.Capacity == nil {
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	}
	d.Capacity[CapacityShares] = resourceapi.DeviceCapacity{
		Value: *q(n),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    q(1),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(1), Max: q(n), Step: q(1)},
		},
	}
}
