package names

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"rdmap79s0", "efa_0", "uverbs3", "ens32", "neuron-driver", "pci0000:44", "0000:4f:00.0", "enp0s1.100", "ñame"} {
		assert.NoError(t, CheckName(s), "%q", s)
	}
	for _, s := range []string{
		"", "rdmap79s0\n", "a\tb", "a\rb", "a\x00b", "a\x7fb", "a\u0085b", "a\u009bb", "\xff", "a\xc3", // control, invalid UTF-8
		"a\u202eb", "a\u2028b", // bidi override, line separator
		"a b", "a/b", "a\u00a0b", strings.Repeat("x", 256),
	} {
		err := CheckName(s)
		assert.ErrorIs(t, err, ErrBadName, "%q", s)
		if err != nil {
			assert.NotContains(t, err.Error(), "\n")
		}
	}
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "p5.48xlarge", "Standard PC (Q35 + ICH9, 2009)", "7: Phy Test", "NVIDIA"} {
		assert.NoError(t, CheckText(s), "%q", s)
	}
	for _, s := range []string{"a\nb", "a\x1b[2Jb", "a\x7f", "a\u0085", "\xff", "a\u202e"} {
		assert.ErrorIs(t, CheckText(s), ErrBadName, "%q", s)
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "devices/pci0000:44/0000:44:00.0", Printable("devices/pci0000:44/0000:44:00.0"))
	assert.Equal(t, `"a\nb"`, Printable("a\nb"))
	assert.Equal(t, `"a\xffb"`, Printable("a\xffb"))
}

// FuzzCheckName: what CheckName accepts is printable, one word and at most
// NAME_MAX bytes; what Printable returns is always printable text.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"rdmap79s0", "efa_0", "a\nb", "\xff", "a b", "a\u0085", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckName(s) == nil {
			if s == "" || len(s) > maxName || !utf8.ValidString(s) || strings.ContainsAny(s, " /") {
				t.Fatalf("%q accepted", s)
			}
			for _, r := range s {
				if unicode.IsControl(r) || !unicode.IsPrint(r) {
					t.Fatalf("%q accepted", s)
				}
			}
		}
		p := Printable(s)
		if CheckText(p) != nil {
			t.Fatalf("Printable(%q) = %q, not printable", s, p)
		}
		if p != s {
			if u, err := strconv.Unquote(p); err != nil || u != s {
				t.Fatalf("Printable(%q) = %q, not its quoted form", s, p)
			}
		}
	})
}

func TestCheckNameErrorQuotes(t *testing.T) {
	t.Parallel()
	err := CheckName("rdmap\nx")
	assert.True(t, errors.Is(err, ErrBadName))
	assert.Contains(t, err.Error(), strconv.Quote("rdmap\nx"))
}
