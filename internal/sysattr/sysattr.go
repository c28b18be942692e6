// Package sysattr holds the sysfs paths and formats that more than one
// package of efakit reads: the reader that owns a file (pcie, efa, neuron,
// host) and the packages that read it again or capture it (snapshot,
// gpudirect, topology, the plugin's doctor). They are not the library's
// API: a program reads these files through the readers.
package sysattr

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/names"
)

// The paths, relative to the sysfs root.
const (
	// PCIDevicesDir is where the kernel lists every PCI function, as links
	// to its real directory under devices/pci<domain>:<bus>.
	PCIDevicesDir = "bus/pci/devices"
	// NeuronClassDir is where the neuron driver's class devices live. They
	// have no link to their PCI function: the family tables give it.
	NeuronClassDir = "devices/virtual/neuron_device"
	// DMIProductName holds the DMI product name, the instance type on EC2.
	DMIProductName = "devices/virtual/dmi/id/product_name"
	// EFADriverVersion is the efa module's version. The out-of-tree driver
	// of the EFA installer sets one ("2.13.0g": DRV_MODULE_VERSION in
	// amzn-drivers' kernel/linux/efa/src/efa_main.c); the in-tree driver, a
	// kernel with efa built in, and a capture without module/ have none.
	EFADriverVersion = "module/efa/version"
	// NVIDIADriverVersion is the nvidia module's MODULE_VERSION
	// ("580.105.08"), present while the module is loaded.
	NVIDIADriverVersion = "module/nvidia/version"
)

// PCIClassDisplay is the PCI base class of display controllers, GPUs
// among them (PCI Code and ID Assignment Specification, class 03h).
const PCIClassDisplay uint8 = 0x03

// CheckModuleVersion checks a module version as the kernel prints it:
// a number first ("2.13.0g"), then at most 63 more printable characters
// with no space.
func CheckModuleVersion(s string) error {
	if s == "" || s[0] < '0' || s[0] > '9' || len(s) > 64 || names.CheckName(s) != nil {
		return fmt.Errorf("%q is not a module version (\"2.13.0g\")", clip(s))
	}
	return nil
}

// ParseDevNumber parses a dev attribute, "231:192", into major and minor.
func ParseDevNumber(s string) (major, minor uint32, err error) {
	a, b, ok := strings.Cut(s, ":")
	if ok {
		ma, err1 := strconv.ParseUint(a, 10, 32)
		mi, err2 := strconv.ParseUint(b, 10, 32)
		// Linux device numbers: 12-bit major, 20-bit minor.
		if err1 == nil && err2 == nil && ma < 1<<12 && mi < 1<<20 {
			return uint32(ma), uint32(mi), nil
		}
	}
	return 0, 0, fmt.Errorf("%q is not \"<major>:<minor>\"", clip(s))
}

// clip shortens a damaged value for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
