package pcie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// Config space sizes (PCI Express Base Specification, 7.2; the kernel's
// PCI_CFG_SPACE_SIZE, PCI_CFG_SPACE_EXP_SIZE), and what an unprivileged
// read of a function's config file returns: the kernel's pci_read_config
// gives the first 64 bytes to a reader without CAP_SYS_ADMIN.
const (
	configSize         = 256
	configSizeExpress  = 4096
	configUnprivileged = 64
)

// extCapACS is the extended capability ID of Access Control Services.
const extCapACS = 0x000d

// ACS control and capability bits (PCI Express Base Specification 7.7.11;
// the kernel's PCI_ACS_*). The names are lspci's.
const (
	acsSourceValidation    uint16 = 1 << 0 // SrcValid
	acsTranslationBlocking uint16 = 1 << 1 // TransBlk
	acsRequestRedirect     uint16 = 1 << 2 // ReqRedir: P2P requests go up to the root
	acsCompletionRedirect  uint16 = 1 << 3 // CmpltRedir
	acsUpstreamForwarding  uint16 = 1 << 4 // UpstreamFwd
	acsEgressControl       uint16 = 1 << 5 // EgressCtrl: P2P to some ports blocked
	acsDirectTranslated    uint16 = 1 << 6 // DirectTrans: ATS-translated P2P goes direct
)

var acsNames = []struct {
	bit  uint16
	name string
}{
	{acsSourceValidation, "SrcValid"}, {acsTranslationBlocking, "TransBlk"}, {acsRequestRedirect, "ReqRedir"},
	{acsCompletionRedirect, "CmpltRedir"}, {acsUpstreamForwarding, "UpstreamFwd"}, {acsEgressControl, "EgressCtrl"},
	{acsDirectTranslated, "DirectTrans"},
}

// ACS is a port's Access Control Services capability: what it can do and
// what is turned on (config space, extended capability 0x000d).
type ACS struct {
	Capability uint16 // ACS Capability Register
	Control    uint16 // ACS Control Register
}

// Redirects reports whether the port sends peer-to-peer requests or
// completions up towards the root complex instead of across the switch
// (request or completion redirect on), or blocks some of them (egress
// control on): traffic between a GPU and an EFA below it then leaves the
// switch.
func (a ACS) Redirects() bool {
	return a.Control&(acsRequestRedirect|acsCompletionRedirect|acsEgressControl) != 0
}

// String prints the control bits as lspci's ACSCtl line does:
// "SrcValid+ TransBlk- ReqRedir+ ...".
func (a ACS) String() string {
	parts := make([]string, 0, len(acsNames))
	for _, n := range acsNames {
		sign := "-"
		if a.Control&n.bit != 0 {
			sign = "+"
		}
		parts = append(parts, n.name+sign)
	}
	return strings.Join(parts, " ")
}

// ErrConfigHidden is the error for a config file read without the
// privilege to see past its first 64 bytes: the extended capabilities,
// ACS among them, are not known.
var ErrConfigHidden = errors.New("config space past 64 bytes is readable only with CAP_SYS_ADMIN")

// parseACS finds the ACS capability in a function's config space, as its
// config file holds it. It returns nil without an error when the space has
// no extended capabilities (256 bytes: conventional PCI) or none of them is
// ACS, and ErrConfigHidden for the 64 bytes an unprivileged reader gets.
// A chain that leaves the space, is not aligned or loops is an error.
func parseACS(config []byte) (*ACS, error) {
	switch {
	case len(config) < configSize && len(config) <= configUnprivileged:
		return nil, ErrConfigHidden
	case len(config) < configSize:
		return nil, fmt.Errorf("config space of %d bytes: neither 64 (unprivileged), 256 nor 4096", len(config))
	case len(config) < configSizeExpress:
		return nil, nil // no extended space
	}
	off := 0x100
	// Each capability takes at least 4 bytes: more steps than that is a loop.
	for range (configSizeExpress - 0x100) / 4 {
		hdr := binary.LittleEndian.Uint32(config[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return nil, nil // no extended capabilities
		}
		if hdr&0xffff == extCapACS {
			if off+8 > configSizeExpress {
				return nil, fmt.Errorf("ACS capability at 0x%x runs past the config space", off)
			}
			return &ACS{
				Capability: binary.LittleEndian.Uint16(config[off+4:]),
				Control:    binary.LittleEndian.Uint16(config[off+6:]),
			}, nil
		}
		next := int(hdr >> 20)
		if next == 0 {
			return nil, nil
		}
		if next < 0x100 || next&3 != 0 || next > configSizeExpress-4 {
			return nil, fmt.Errorf("extended capability at 0x%x points at 0x%x, outside the extended space or not dword-aligned", off, next)
		}
		off = next
	}
	return nil, errors.New("extended capability chain loops")
}

// ReadACS reads the ACS capability of d from its config file
// (d.Path/config), as parseACS does, with errors that name the function and
// the file: errors.Is(err, ErrConfigHidden) for an unprivileged reader.
func ReadACS(fsys fs.FS, d *Device) (*ACS, error) {
	r := sysread.New(fsys)
	file := d.Path + "/config"
	b, err := r.ReadFile(file)
	var acs *ACS
	if err == nil {
		acs, err = parseACS(b)
	}
	if err != nil {
		return nil, &sysfs.Error{Subsystem: "pci", Device: d.Address.String(), File: file, Err: fserr.Cause(err)}
	}
	return acs, nil
}
