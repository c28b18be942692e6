package efa

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// NetnsMode is the kernel's RDMA network namespace mode: "shared" (every
// namespace sees every RDMA device, the default) or "exclusive" (a device
// belongs to one namespace).
type NetnsMode string

// The RDMA namespace modes the kernel knows.
const (
	NetnsShared    NetnsMode = "shared"
	NetnsExclusive NetnsMode = "exclusive"
)

// Live answers what sysfs does not hold: facts only the running kernel
// knows, through netlink. The live machine has Netlink{}; tests and captured
// roots use a fixed value such as StaticLive.
type Live interface {
	// RDMANetnsMode returns the kernel's RDMA namespace mode.
	RDMANetnsMode() (NetnsMode, error)
}

// Netlink asks the running kernel over RDMA netlink.
type Netlink struct{}

// RDMANetnsMode asks the kernel (RDMA_NLDEV_CMD_SYS_GET).
func (Netlink) RDMANetnsMode() (NetnsMode, error) {
	m, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("rdma netns mode: %w", err)
	}
	switch NetnsMode(m) {
	case NetnsShared, NetnsExclusive:
		return NetnsMode(m), nil
	}
	return "", fmt.Errorf("rdma netns mode: kernel answered %q", m)
}

// StaticLive answers with fixed values: for captured roots, and for tests.
type StaticLive struct {
	Mode NetnsMode
	Err  error
}

// RDMANetnsMode returns the fixed mode or error.
func (s StaticLive) RDMANetnsMode() (NetnsMode, error) { return s.Mode, s.Err }
