package sysattr_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
)

func TestParseDevNumber(t *testing.T) {
	t.Parallel()
	ma, mi, err := sysattr.ParseDevNumber("231:192")
	assert.NoError(t, err)
	assert.Equal(t, [2]uint32{231, 192}, [2]uint32{ma, mi})
	for _, in := range []string{"", "231", "231:", ":1", "a:b", "4096:0", "1:1048576", "-1:2", "231:192:1"} {
		_, _, err := sysattr.ParseDevNumber(in)
		assert.Error(t, err, "%q", in)
	}
}

func FuzzParseDevNumber(f *testing.F) {
	f.Add("231:192")
	f.Add("1:")
	f.Fuzz(func(t *testing.T, s string) {
		ma, mi, err := sysattr.ParseDevNumber(s)
		if err == nil && (ma >= 1<<12 || mi >= 1<<20) {
			t.Fatalf("%q -> %d:%d", s, ma, mi)
		}
	})
}

func TestCheckModuleVersion(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"2.13.0g", "1.16.0", "3.1.0g", "2.17.3g+dirty"} {
		assert.NoError(t, sysattr.CheckModuleVersion(s), s)
	}
	for _, s := range []string{"", "g2.13.0", "2.13 0g", "2.13.0\x7f", "2.13.0\xff", strings.Repeat("1", 65)} {
		assert.Error(t, sysattr.CheckModuleVersion(s), "%q", s)
	}
}

func FuzzCheckModuleVersion(f *testing.F) {
	for _, s := range []string{"2.13.0g", "", "g", "2.13 0g", "1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sysattr.CheckModuleVersion(s) == nil && names.CheckName(s) != nil {
			t.Fatalf("%q accepted but cannot be printed", s)
		}
	})
}
