package pcie

import (
	"fmt"
	"strconv"
	"strings"
)

// Address is a PCI function address: domain, bus, device (slot) and
// function.
type Address struct {
	Domain   uint32 // 16 bits on most machines; VMD domains use 0x10000 and up
	Bus      uint8
	Device   uint8 // 0-31
	Function uint8 // 0-7
}

// ParseAddress parses a bus/device/function address: "0000:4f:00.0",
// "4f:00.0" (domain 0), upper or lower case hex, with a domain of up to
// eight hex digits.
func ParseAddress(s string) (Address, error) {
	var a Address
	rest := s
	if strings.Count(s, ":") == 2 {
		i := strings.IndexByte(s, ':')
		d, err := parseHex(s[:i], 8)
		if err != nil {
			return Address{}, fmt.Errorf("pci address %q: domain: %w", s, err)
		}
		a.Domain = uint32(d)
		rest = s[i+1:]
	}
	bus, devfn, ok := strings.Cut(rest, ":")
	if !ok {
		return Address{}, fmt.Errorf("pci address %q: want [domain:]bus:device.function", s)
	}
	dev, fn, ok := strings.Cut(devfn, ".")
	if !ok {
		return Address{}, fmt.Errorf("pci address %q: want [domain:]bus:device.function", s)
	}
	b, err := parseHex(bus, 2)
	if err != nil {
		return Address{}, fmt.Errorf("pci address %q: bus: %w", s, err)
	}
	d, err := parseHex(dev, 2)
	if err != nil || d > 31 {
		return Address{}, fmt.Errorf("pci address %q: device must be 00-1f", s)
	}
	f, err := parseHex(fn, 1)
	if err != nil || f > 7 {
		return Address{}, fmt.Errorf("pci address %q: function must be 0-7", s)
	}
	a.Bus, a.Device, a.Function = uint8(b), uint8(d), uint8(f)
	return a, nil
}

// parseHex parses 1 to max hex digits, with no sign or prefix.
func parseHex(s string, max int) (uint64, error) {
	if s == "" || len(s) > max {
		return 0, fmt.Errorf("%q is not 1-%d hex digits", s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return 0, fmt.Errorf("%q is not 1-%d hex digits", s, max)
		}
	}
	return strconv.ParseUint(s, 16, 64)
}

// String prints the canonical form, "0000:4f:00.0".
func (a Address) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// MarshalText prints the canonical form.
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText parses any form ParseAddress accepts.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// Compare orders addresses by domain, bus, device and function.
func (a Address) Compare(b Address) int {
	switch {
	case a.Domain != b.Domain:
		return cmp(a.Domain, b.Domain)
	case a.Bus != b.Bus:
		return cmp(a.Bus, b.Bus)
	case a.Device != b.Device:
		return cmp(a.Device, b.Device)
	}
	return cmp(a.Function, b.Function)
}

func cmp[T uint8 | uint32](a, b T) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
