package pcie_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

func TestParseACS(t *testing.T) {
	t.Parallel()
	on := &pcie.ACS{Capability: 0x5f, Control: pcie.ACSSourceValidation | pcie.ACSRequestRedirect | pcie.ACSCompletionRedirect | pcie.ACSUpstreamForwarding}
	loop := fakesys.ExpressConfig(0x1d0f, 0x0200, nil)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|0x100<<20) // points at itself
	outside := fakesys.ExpressConfig(0x1d0f, 0x0200, nil)
	binary.LittleEndian.PutUint32(outside[0x100:], 0x0001|0x040<<20) // into the conventional space
	unaligned := fakesys.ExpressConfig(0x1d0f, 0x0200, nil)
	binary.LittleEndian.PutUint32(unaligned[0x100:], 0x0001|0x102<<20)
	for _, tc := range []struct {
		name   string
		config []byte
		want   *pcie.ACS
		err    error // errors.Is; nil with wantErr false
		bad    bool
	}{
		{"ACS on", fakesys.ExpressConfig(0x1d0f, 0x0200, on), on, nil, false},
		{"ACS off", fakesys.ExpressConfig(0x1d0f, 0x0200, &pcie.ACS{Capability: 0x5f}), &pcie.ACS{Capability: 0x5f}, nil, false},
		{"no ACS in the chain", fakesys.ExpressConfig(0x10de, 0x2330, nil), nil, nil, false},
		{"no extended capabilities", make([]byte, pcie.ConfigSizeExpress), nil, nil, false},
		{"conventional PCI", make([]byte, pcie.ConfigSize), nil, nil, false},
		{"unprivileged read", make([]byte, pcie.ConfigUnprivileged), nil, pcie.ErrConfigHidden, false},
		{"empty", nil, nil, pcie.ErrConfigHidden, false},
		{"odd size", make([]byte, 100), nil, nil, true},
		{"loop", loop, nil, nil, true},
		{"next outside the extended space", outside, nil, nil, true},
		{"next unaligned", unaligned, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pcie.ParseACS(tc.config)
			switch {
			case tc.err != nil:
				assert.ErrorIs(t, err, tc.err)
			case tc.bad:
				assert.Error(t, err)
			default:
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestACSString(t *testing.T) {
	t.Parallel()
	a := pcie.ACS{Control: pcie.ACSSourceValidation | pcie.ACSRequestRedirect | pcie.ACSCompletionRedirect | pcie.ACSUpstreamForwarding}
	assert.Equal(t, "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-", a.String())
	assert.True(t, a.Redirects())
	assert.False(t, pcie.ACS{Control: pcie.ACSSourceValidation | pcie.ACSDirectTranslated}.Redirects())
	assert.True(t, pcie.ACS{Control: pcie.ACSEgressControl}.Redirects())
}

func TestReadACS(t *testing.T) {
	t.Parallel()
	b := fakesys.New()
	b.AddPCI(fakesys.PCI{Addr: "0000:44:00.0", Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, NUMA: -1})
	b.AddPCI(fakesys.PCI{Addr: "0000:45:00.0", Parent: "0000:44:00.0", Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, NUMA: -1})
	b.AddPCI(fakesys.PCI{Addr: "0000:46:00.0", Parent: "0000:44:00.0", Vendor: 0x1d0f, Device: 0x0200, Class: 0x060400, NUMA: -1})
	b.Config("0000:44:00.0", fakesys.ExpressConfig(0x1d0f, 0x0200, &pcie.ACS{Capability: 0x5f, Control: pcie.ACSRequestRedirect}))
	b.Config("0000:45:00.0", make([]byte, pcie.ConfigUnprivileged))
	tree, err := pcie.Discover(sysread.New(b.FS()))
	require.NoError(t, err)
	r := sysread.New(b.FS())

	acs, err := pcie.ReadACS(r, tree.Devices[0])
	require.NoError(t, err)
	assert.Equal(t, &pcie.ACS{Capability: 0x5f, Control: pcie.ACSRequestRedirect}, acs)

	_, err = pcie.ReadACS(r, tree.Devices[1])
	assert.ErrorIs(t, err, pcie.ErrConfigHidden)
	assert.ErrorContains(t, err, "pci 0000:45:00.0: devices/pci0000:44/0000:44:00.0/0000:45:00.0/config")

	_, err = pcie.ReadACS(r, tree.Devices[2]) // no config file
	var de *sysfs.Error
	require.True(t, errors.As(err, &de), "%v", err)
	assert.Equal(t, "pci", de.Subsystem)
	assert.Equal(t, "0000:46:00.0", de.Device)
}

func FuzzParseACS(f *testing.F) {
	f.Add(fakesys.ExpressConfig(0x1d0f, 0x0200, &pcie.ACS{Capability: 0x5f, Control: 0x1d}))
	f.Add(fakesys.ExpressConfig(0x10de, 0x2330, nil))
	f.Add(make([]byte, pcie.ConfigUnprivileged))
	f.Add(make([]byte, pcie.ConfigSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		acs, err := pcie.ParseACS(b)
		if err != nil && acs != nil {
			t.Fatalf("an error with a capability: %v", err)
		}
		if acs != nil {
			_ = acs.String()
		}
	})
}
