// Package live is what the plugin and doctor ask the running kernel
// besides sysfs, behind an interface: the live machine answers through
// netlink (Kernel), a captured root or a test with fixed values (Static).
package live

import "github.com/efakit/efakit/rdmans"

// Live answers facts only the running kernel knows.
type Live interface {
	// RDMANetnsMode returns the kernel's RDMA namespace mode.
	RDMANetnsMode() (rdmans.Mode, error)
}

// Kernel asks the running kernel over RDMA netlink.
type Kernel struct{}

// RDMANetnsMode asks the kernel (rdmans.Read).
func (Kernel) RDMANetnsMode() (rdmans.Mode, error) { return rdmans.Read() }

// Static answers with fixed values: for captured roots, and for tests.
type Static struct {
	Mode rdmans.Mode
	Err  error
}

// RDMANetnsMode returns the fixed mode or error.
func (s Static) RDMANetnsMode() (rdmans.Mode, error) { return s.Mode, s.Err }
