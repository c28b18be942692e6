package efa

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseEnumAttr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"4: ACTIVE": "ACTIVE", "5: LinkUp": "LinkUp", "1: DOWN": "DOWN", "7: unspecified": "unspecified"} {
		got, err := ParseEnumAttr(in)
		assert.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"", "ACTIVE", "4:ACTIVE", ": ACTIVE", "x: ACTIVE", "4: "} {
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
	for _, in := range []string{"", "100", "100 Mb/sec", "x Gb/sec", "-1 Gb/sec", "1e3 Gb/sec", "NaN Gb/sec", "Inf Gb/sec", "0x10 Gb/sec"} {
		_, err := ParseRate(in)
		assert.Error(t, err, "%q", in)
	}
}

func TestParseDevNumber(t *testing.T) {
	t.Parallel()
	ma, mi, err := ParseDevNumber("231:192")
	assert.NoError(t, err)
	assert.Equal(t, [2]uint32{231, 192}, [2]uint32{ma, mi})
	for _, in := range []string{"", "231", "231:", ":1", "a:b", "4096:0", "1:1048576", "-1:2", "231:192:1"} {
		_, _, err := ParseDevNumber(in)
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
	// The GID of HARDWARE.md, fe80::14b0:33ff:fef8:77cd, comes from MAC
	// 16:b0:33:f8:77:cd (the universal/local bit flipped).
	assert.Equal(t, "fe80:0000:0000:0000:14b0:33ff:fef8:77cd", eui64GID("16:b0:33:f8:77:cd"))
	assert.Equal(t, "", eui64GID("16:b0:33:f8:77"))
	assert.Equal(t, "", eui64GID("16:b0:33:f8:77:zz"))
}

func FuzzParseEnumAttr(f *testing.F) {
	f.Add("4: ACTIVE")
	f.Add("x")
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseEnumAttr(s) })
}

func FuzzParseRate(f *testing.F) {
	f.Add("100 Gb/sec (4X EDR)")
	f.Add("2.5 Gb/sec")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err == nil && (v < 0 || v != v) {
			t.Fatalf("%q -> %v", s, v)
		}
	})
}

func FuzzParseDevNumber(f *testing.F) {
	f.Add("231:192")
	f.Add("1:")
	f.Fuzz(func(t *testing.T, s string) {
		ma, mi, err := ParseDevNumber(s)
		if err == nil && (ma >= 1<<12 || mi >= 1<<20) {
			t.Fatalf("%q -> %d:%d", s, ma, mi)
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
