package efa_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
)

func TestReadDriverVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(b *fakesys.Builder)
		want  string
		error string
	}{
		{"out-of-tree", func(b *fakesys.Builder) { b.Attr("module/efa/version", "2.13.0g") }, "2.13.0g", ""},
		{"in-tree: module without version", func(b *fakesys.Builder) { b.Dir("module/efa") }, "", ""},
		{"no module/", nil, "", ""},
		{"damaged", func(b *fakesys.Builder) { b.Attr("module/efa/version", "2.13\n0g") }, "", `efa efa module: module/efa/version: "2.13\n0g" is not a module version`},
		{"not a version", func(b *fakesys.Builder) { b.Attr("module/efa/version", "unknown") }, "", `efa efa module: module/efa/version: "unknown" is not a module version`},
		{"a directory", func(b *fakesys.Builder) { b.Dir("module/efa/version") }, "", "efa efa module: module/efa/version: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := smallSwitch()
			if tc.edit != nil {
				tc.edit(b)
			}
			v, err := efa.ReadDriverVersion(sysread.New(b.FS()))
			assert.Equal(t, tc.want, v)
			if tc.error == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.error), err.Error())
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func TestParseGDR(t *testing.T) {
	t.Parallel()
	g, err := efa.ParseGDR("1")
	assert.NoError(t, err)
	assert.True(t, g)
	g, err = efa.ParseGDR("0")
	assert.NoError(t, err)
	assert.False(t, g)
	for _, s := range []string{"", "2", "yes", "1 ", "01", "NVIDIA"} {
		_, err := efa.ParseGDR(s)
		assert.Error(t, err, "%q", s)
	}
}

// TestGDR: the legacy gdr file read with the other optional attributes;
// absent is no error and nil; damaged is an error naming the EFA and the
// file, and nil; a discovery that does not ask for it leaves it unread
// until ReadOptional.
func TestGDR(t *testing.T) {
	t.Parallel()
	b := smallSwitch()
	b.Attr(b.PCIDir("0000:47:00.0")+"/gdr", "1")
	b.Attr(b.PCIDir("0000:48:00.0")+"/gdr", "0")
	_, res, err := efa.Scan(b.FS())
	require.NoError(t, err)
	require.Len(t, res.EFAs, 2)
	require.NotNil(t, res.EFAs[0].GDR)
	assert.True(t, *res.EFAs[0].GDR)
	require.NotNil(t, res.EFAs[1].GDR)
	assert.False(t, *res.EFAs[1].GDR)

	_, res, err = efa.Scan(smallSwitch().FS())
	require.NoError(t, err)
	assert.Nil(t, res.EFAs[0].GDR, "no gdr file: the in-tree driver, or 2.6.0 and later")

	b = smallSwitch()
	b.Attr(b.PCIDir("0000:48:00.0")+"/gdr", "NVIDIA")
	_, res, err = efa.Scan(b.FS())
	require.Error(t, err)
	assert.Equal(t, `efa rdmap72s0: devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:02.0/0000:48:00.0/gdr: "NVIDIA" is not a gdr value ("1" or "0")`, err.Error())
	require.Len(t, res.EFAs, 2, "the EFA is kept")
	assert.Nil(t, res.EFAs[1].GDR)

	b = smallSwitch()
	b.Attr(b.PCIDir("0000:47:00.0")+"/gdr", "1")
	// A lean pass (the plugin's) reads only what it asks for.
	r := sysread.NewLean(b.FS(), sysread.Lean{})
	tree, err := pcie.Discover(r)
	require.NoError(t, err)
	res, err = efa.Discover(r, tree)
	require.NoError(t, err)
	assert.Nil(t, res.EFAs[0].GDR, "not asked for")
	res, err = efa.Discover(sysread.NewLean(b.FS(), sysread.Lean{EFA: sysread.EFAGDR}), tree)
	require.NoError(t, err)
	d := res.EFAs[0]
	require.NotNil(t, d.GDR)
	assert.True(t, *d.GDR)
	assert.Empty(t, d.FirmwareVer, "fw_ver not asked for")
	// efa.Scan, the public pass, reads everything.
	_, res, err = efa.Scan(b.FS())
	require.NoError(t, err)
	require.NotNil(t, res.EFAs[0].GDR)
}

func FuzzParseGDR(f *testing.F) {
	for _, s := range []string{"1", "0", "", "2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := efa.ParseGDR(s)
		if err == nil && (s == "1") != g {
			t.Fatalf("%q -> %v", s, g)
		}
		if err == nil && s != "0" && s != "1" {
			t.Fatalf("%q accepted", s)
		}
	})
}
