package pcie

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/efakit/efakit/internal/names"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"0000:4f:00.0", "0000:4f:00.0", true},
		{"4f:00.0", "0000:4f:00.0", true},
		{"0000:4F:1B.7", "0000:4f:1b.7", true},
		{"10000:00:02.0", "10000:00:02.0", true}, // VMD domain
		{"1:2:3.4", "0001:02:03.4", true},
		{"ffffffff:ff:1f.7", "ffffffff:ff:1f.7", true},
		{"", "", false},
		{"4f:00", "", false},
		{"0000:4f:20.0", "", false}, // device > 31
		{"0000:4f:00.8", "", false}, // function > 7
		{"0000:100:00.0", "", false},
		{"123456789:00:00.0", "", false},
		{"0000:4f:00.0 ", "", false},
		{"+0:4f:00.0", "", false},
		{"0x00:4f:00.0", "", false},
		{"0000:4f:00.0.1", "", false},
		{"a:b:c:d.0", "", false},
	} {
		a, err := ParseAddress(tc.in)
		if !tc.ok {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		if assert.NoError(t, err, "%q", tc.in) {
			assert.Equal(t, tc.want, a.String(), "%q", tc.in)
		}
	}
}

func TestAddressOrderAndText(t *testing.T) {
	t.Parallel()
	a, _ := ParseAddress("0000:4f:00.0")
	b, _ := ParseAddress("0000:50:00.0")
	c, _ := ParseAddress("0001:00:00.0")
	assert.Equal(t, -1, a.Compare(b))
	assert.Equal(t, 1, c.Compare(b))
	assert.Equal(t, 0, a.Compare(a))
	var u Address
	assert.NoError(t, u.UnmarshalText([]byte("4F:00.0")))
	assert.Equal(t, a, u)
	assert.Error(t, u.UnmarshalText([]byte("x")))
}

func TestParseCPUList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want CPUList
		ok   bool
	}{
		{"0-3", CPUList{0, 1, 2, 3}, true},
		{"0-1,4,6-7", CPUList{0, 1, 4, 6, 7}, true},
		{"", CPUList{}, true},
		{"5", CPUList{5}, true},
		{"0-1\n", CPUList{0, 1}, true},
		{"3-1", nil, false},
		{"1,1", nil, false},
		{"2,1", nil, false},
		{"a", nil, false},
		{"-1", nil, false},
		{"1-", nil, false},
		{"0-8192", nil, false},
		{"0,,1", nil, false},
	} {
		got, err := ParseCPUList(tc.in)
		if !tc.ok {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		if assert.NoError(t, err, "%q", tc.in) {
			assert.Equal(t, tc.want, got, "%q", tc.in)
		}
	}
	l, _ := ParseCPUList("0-47,96-143")
	assert.Equal(t, "0-47,96-143", l.String())
	assert.Equal(t, "1,3-4", CPUList{1, 3, 4}.String())
}

func TestParseHexAttr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		bits int
		want uint64
		ok   bool
	}{
		{"0x1d0f", 16, 0x1d0f, true},
		{"0x020000", 24, 0x020000, true},
		{"0xEFA1", 16, 0xefa1, true},
		{"0x10000", 16, 0, false},
		{"1d0f", 16, 0, false},
		{"0x", 16, 0, false},
		{"0x-1", 16, 0, false},
		{"0x1d0g", 16, 0, false},
		{"", 16, 0, false},
		{"0x00000000000000001", 64, 0, false},
	} {
		got, err := ParseHexAttr(tc.in, tc.bits)
		if !tc.ok {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		if assert.NoError(t, err, "%q", tc.in) {
			assert.Equal(t, tc.want, got, "%q", tc.in)
		}
	}
}

func TestParseNUMANode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"-1": -1, "0": 0, "1": 1, "7": 7} {
		got, err := ParseNUMANode(in)
		assert.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"", "-2", "x", "1.0", "99999999999999999999", " 1"} {
		_, err := ParseNUMANode(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestClass(t *testing.T) {
	t.Parallel()
	c := Class(0x060400)
	assert.Equal(t, uint8(0x06), c.Base())
	assert.Equal(t, ClassBridgePCI, c.Sub())
	assert.Equal(t, "0x060400", c.String())
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"0000:4f:00.0", "4f:00.0", "10000:00:02.0", "0:0:0.0", "zz:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		// The canonical form parses back to the same address.
		b, err := ParseAddress(a.String())
		if err != nil || a != b {
			t.Fatalf("%q -> %s -> %v, %v", s, a, b, err)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-47,96-143", "", "0", "1,3-4", "3-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseCPUList(s)
		if err != nil {
			return
		}
		l2, err := ParseCPUList(l.String())
		if err != nil || len(l) != len(l2) {
			t.Fatalf("%q -> %s -> %v, %v", s, l, l2, err)
		}
	})
}

func FuzzParseHexAttr(f *testing.F) {
	for _, s := range []string{"0x1d0f", "0x020000", "0x", "1d0f"} {
		f.Add(s, 16)
	}
	f.Fuzz(func(t *testing.T, s string, bits int) {
		if bits < 1 || bits > 64 {
			return
		}
		v, err := ParseHexAttr(s, bits)
		if err == nil && bits < 64 && v>>bits != 0 {
			t.Fatalf("%q: %#x does not fit %d bits", s, v, bits)
		}
	})
}

func FuzzParseNUMANode(f *testing.F) {
	for _, s := range []string{"-1", "0", "3", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNUMANode(s)
		if err == nil && n < -1 {
			t.Fatalf("%q -> %d", s, n)
		}
	})
}

func TestParseUevent(t *testing.T) {
	t.Parallel()
	u, err := ParseUevent("DRIVER=efa\nPCI_CLASS=20000\nPCI_ID=1D0F:EFA1\nPCI_SUBSYS_ID=1D0F:EFA1\nPCI_SLOT_NAME=0000:4f:00.0\nMODALIAS=pci:v00001D0Fd0000EFA1sv00001D0Fsd0000EFA1bc02sc00i00\n")
	assert.NoError(t, err)
	assert.Equal(t, Uevent{Vendor: 0x1d0f, Device: 0xefa1, SubsystemVendor: 0x1d0f, SubsystemDevice: 0xefa1, Class: 0x020000, Driver: "efa", Slot: "0000:4f:00.0", Complete: true}, u)
	u, err = ParseUevent("PCI_CLASS=C0330\nPCI_ID=8086:A36D\n")
	assert.NoError(t, err)
	assert.False(t, u.Complete, "no PCI_SUBSYS_ID: read the attribute files instead")
	assert.Equal(t, Class(0x0c0330), u.Class)
	u, err = ParseUevent("")
	assert.NoError(t, err)
	assert.False(t, u.Complete)
	for _, in := range []string{"PCI_ID=1D0F", "PCI_ID=1D0F:EFA1Z", "PCI_CLASS=1234567", "PCI_CLASS=", "garbage", "DRIVER=", "DRIVER=a/b", "DRIVER=ef\x7fa", "DRIVER=ef\u0085a", "DRIVER=efa\xff", "PCI_SUBSYS_ID=:"} {
		_, err := ParseUevent(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseUevent(f *testing.F) {
	f.Add("DRIVER=efa\nPCI_CLASS=20000\nPCI_ID=1D0F:EFA1\nPCI_SUBSYS_ID=1D0F:EFA1\nPCI_SLOT_NAME=0000:4f:00.0\n")
	f.Add("PCI_CLASS=60400\n")
	f.Add("x")
	f.Add("DRIVER=ef\x85a\n")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUevent(s)
		if err == nil && uint32(u.Class)>>24 != 0 {
			t.Fatalf("%q: class %x over 24 bits", s, uint32(u.Class))
		}
		if err == nil && u.Driver != "" && names.CheckName(u.Driver) != nil {
			t.Fatalf("%q: driver %q cannot be printed", s, u.Driver)
		}
	})
}
