package resources

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeConfig(t *testing.T) {
	t.Parallel()
	good := map[string]EFAConfig{
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig"}`:                   {APIVersion: ConfigAPIVersion, Kind: ConfigKind},
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"}`:      {APIVersion: ConfigAPIVersion, Kind: ConfigKind, Env: EnvNone},
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`: {APIVersion: ConfigAPIVersion, Kind: ConfigKind, Env: EnvLibfabric},
		" {\"kind\":\"EFAConfig\",\"apiVersion\":\"efakit.io/v1alpha1\"}\n":        {APIVersion: ConfigAPIVersion, Kind: ConfigKind},
	}
	for in, want := range good {
		got, err := DecodeConfig([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	bad := map[string]string{
		``:     "parameters: EOF",
		`null`: "apiVersion",
		`[]`:   "cannot unmarshal array",
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","evn":"none"}`:                                `unknown field "evn"`,
		`{"apiVersion":"efakit.io/v1beta9","kind":"EFAConfig"}`:                                              `apiVersion "efakit.io/v1beta9"`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"GpuConfig"}`:                                             `kind "GpuConfig"`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"Libfabric"}`:                           `env "Libfabric": want none or libfabric`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":1}`:                                     "cannot unmarshal number",
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig"} {}`:                                          "data after the object",
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"`:                                 "unexpected EOF",
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"` + strings.Repeat("x", 11<<10) + `"}`: "at most 10240",
	}
	for in, msg := range bad {
		_, err := DecodeConfig([]byte(in))
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
	}
}

// FuzzDecodeConfig: opaque parameters come from any user who can write a
// claim; decoding never panics, and what it accepts is a known mode of
// efakit's version and kind.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"}`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig"}`,
		`{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"x"} 1`,
		`{"kind":"EFAConfig","apiVersion":"efakit.io/v1alpha1","env":"libfabric","env":"none"}`,
		`{}`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeConfig(raw)
		if err != nil {
			return
		}
		if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
			t.Fatalf("accepted %q as %+v", raw, c)
		}
		if c.Env != "" && c.Env != EnvNone && c.Env != EnvLibfabric {
			t.Fatalf("accepted env %q", c.Env)
		}
	})
}
