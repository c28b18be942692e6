// Package rdmans reads the kernel's RDMA network namespace mode over RDMA
// netlink: a fact sysfs does not hold, and the one place the library
// links netlink, so that importing efa or topology does not.
//
// In the shared mode (the kernel's default) every network namespace sees
// and opens every RDMA device. In the exclusive mode a device belongs to
// one namespace: a pod in its own namespace cannot open an EFA that stays
// in the initial one, and no EFA driver can move one into a pod's
// namespace (the kernel moves only devices whose driver implements
// disassociate_ucontext).
package rdmans

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Mode is the kernel's RDMA namespace mode.
type Mode string

// The modes the kernel knows.
const (
	Shared    Mode = "shared"
	Exclusive Mode = "exclusive"
)

// Read asks the running kernel (RDMA_NLDEV_CMD_SYS_GET). A kernel without
// RDMA netlink, or an answer that is neither mode, is an error.
func Read() (Mode, error) {
	m, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("rdma netns mode: %w", err)
	}
	switch Mode(m) {
	case Shared, Exclusive:
		return Mode(m), nil
	}
	return "", fmt.Errorf("rdma netns mode: kernel answered %q", m)
}
