package efa

import (
	"testing"

	"github.com/stretchr/testify/assert"

	namecheck "github.com/efakit/efakit/internal/names"
)

func TestParseEnumAttr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"4: ACTIVE": "ACTIVE", "5: LinkUp": "LinkUp", "1: DOWN": "DOWN", "7: unspecified": "unspecified"} {
		got, err := ParseEnumAttr(in)
		assert.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"", "ACTIVE", "4:ACTIVE", ": ACTIVE", "x: ACTIVE", "4: ", "4: ACT\nIVE", "4: ACTIVE\x1b", "4: \xff"} {
		_, err := ParseEnumAttr(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"100 Gb/sec (4X EDR)": 100, "200 Gb/sec (4X HDR)": 200, "400 Gb/sec (8X HDR)": 400,
		"2.5 Gb/sec (1X SDR)": 2.5, "0 Gb/sec": 0,
	} {
		got, err := ParseRate(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "100", "100 Mb/sec", "x Gb/sec", "-1 Gb/sec", "1e3 Gb/sec", "NaN Gb/sec", "Inf Gb/sec", "0x10 Gb/sec", "100 Gb/sec (4X\tEDR)", "100 Gb/sec\n(4X EDR)"} {
		_, err := ParseRate(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestParseCounter(t *testing.T) {
	t.Parallel()
	v, err := ParseCounter("18446744073709551615")
	assert.NoError(t, err)
	assert.Equal(t, uint64(18446744073709551615), v)
	for _, in := range []string{"", "-1", "1.5", "18446744073709551616", "0x10"} {
		_, err := ParseCounter(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestGeneration(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "efa0", Generation(0xefa0).String())
	assert.Equal(t, "efa3", Generation(0xefa3).String())
	assert.Equal(t, "efa4", Generation(0xefa4).String(), "a later generation is kept")
	assert.Equal(t, "0x0001", Generation(1).String())
}

func TestEUI64(t *testing.T) {
	t.Parallel()
	// The GID of docs/hardware.md, fe80::14b0:33ff:fef8:77cd, comes from MAC
	// 16:b0:33:f8:77:cd (the universal/local bit flipped).
	assert.Equal(t, "fe80:0000:0000:0000:14b0:33ff:fef8:77cd", eui64GID("16:b0:33:f8:77:cd"))
	assert.Equal(t, "", eui64GID("16:b0:33:f8:77"))
	assert.Equal(t, "", eui64GID("16:b0:33:f8:77:zz"))
}

func TestCheckGIDAndMAC(t *testing.T) {
	t.Parallel()
	assert.NoError(t, checkGID("fe80:0000:0000:0000:14b0:33ff:fef8:77cd"))
	for _, in := range []string{"", "fe80::1", "fe80:0000:0000:0000:14b0:33ff:fef8", "fe80:0000:0000:0000:14b0:33ff:fef8:77cz", "fe80:0000:0000:0000:14b0:33ff:fef8:77cd:0000"} {
		assert.Error(t, checkGID(in), "%q", in)
	}
	b, err := parseMAC("16:b0:33:f8:77:cd")
	assert.NoError(t, err)
	assert.Equal(t, [6]byte{0x16, 0xb0, 0x33, 0xf8, 0x77, 0xcd}, b)
	for _, in := range []string{"", "16:b0:33:f8:77", "16:b0:33:f8:77:c", "16:b0:33:f8:77:+1", "16-b0-33-f8-77-cd", "16:b0:33:f8:77:cd:00"} {
		_, err := parseMAC(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestCheckUverbsName(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"uverbs0", "uverbs31"} {
		assert.NoError(t, checkUverbsName(in), in)
	}
	for _, in := range []string{"uverbs", "uverbs-1", "uverbs1x", "uverbs1\n", "abi_version", "uverbs\xff"} {
		assert.Error(t, checkUverbsName(in), "%q", in)
	}
}

// FuzzParseMAC: a MAC that parses makes a GID of the form checkGID
// accepts, the GID the EFA beside it has.
func FuzzParseMAC(f *testing.F) {
	f.Add("16:b0:33:f8:77:cd")
	f.Add("16:b0:33:f8:77:+1")
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := parseMAC(s); err == nil && checkGID(eui64GID(s)) != nil {
			t.Fatalf("%q -> GID %q", s, eui64GID(s))
		}
	})
}

func FuzzCheckGID(f *testing.F) {
	f.Add("fe80:0000:0000:0000:14b0:33ff:fef8:77cd")
	f.Add("fe80::1")
	f.Fuzz(func(t *testing.T, s string) {
		if checkGID(s) == nil && (len(s) != 39 || namecheck.CheckName(s) != nil) {
			t.Fatalf("%q accepted", s)
		}
	})
}

func FuzzCheckUverbsName(f *testing.F) {
	f.Add("uverbs0")
	f.Add("uverbs1\n")
	f.Fuzz(func(t *testing.T, s string) {
		if checkUverbsName(s) == nil && namecheck.CheckName(s) != nil {
			t.Fatalf("%q accepted", s)
		}
	})
}

func FuzzParseEnumAttr(f *testing.F) {
	f.Add("4: ACTIVE")
	f.Add("7: Phy Test")
	f.Add("x")
	f.Add("4: ACT\nIVE")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseEnumAttr(s); err == nil && (v == "" || namecheck.CheckText(v) != nil) {
			t.Fatalf("%q -> %q", s, v)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	f.Add("100 Gb/sec (4X EDR)")
	f.Add("2.5 Gb/sec")
	f.Add("100 Gb/sec (4X\tEDR)")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err == nil && (v < 0 || v != v || namecheck.CheckText(s) != nil) {
			t.Fatalf("%q -> %v", s, v)
		}
	})
}

func FuzzParseCounter(f *testing.F) {
	f.Add("0")
	f.Add("18446744073709551615")
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseCounter(s) })
}

func TestCheckGUID(t *testing.T) {
	t.Parallel()
	assert.NoError(t, checkGUID("cd77:f833:0000:1001"))
	for _, in := range []string{"", "cd77:f833:0000", "cd77:f833:0000:100g", "cd77f8330000:1001::", "cd77:f833:0000:10011"} {
		assert.Error(t, checkGUID(in), "%q", in)
	}
}

func FuzzCheckGUID(f *testing.F) {
	f.Add("cd77:f833:0000:1001")
	f.Add("0000:0000:0000:0000")
	f.Fuzz(func(t *testing.T, s string) {
		if checkGUID(s) == nil && len(s) != 19 {
			t.Fatalf("%q accepted", s)
		}
	})
}
