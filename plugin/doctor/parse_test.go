package doctor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

func TestParseMemlockLimit(t *testing.T) {
	t.Parallel()
	const header = "Limit                     Soft Limit           Hard Limit           Units     \n"
	for _, tc := range []struct {
		name       string
		in         string
		soft, hard uint64
		err        string
	}{
		{"bytes", header + "Max locked memory         8388608              8388608              bytes     \n", 8388608, 8388608, ""},
		{"unlimited", header + "Max locked memory         unlimited            unlimited            bytes     \n", unix.RLIM_INFINITY, unix.RLIM_INFINITY, ""},
		{"soft below hard", "Max locked memory 65536 unlimited bytes\n", 65536, unix.RLIM_INFINITY, ""},
		{"no line", header + "Max open files 1024 1024 files\n", 0, 0, `no "Max locked memory" line`},
		{"one value", "Max locked memory 65536\n", 0, 0, "want soft and hard limit"},
		{"garbage", "Max locked memory lots unlimited bytes\n", 0, 0, `"lots" is not a number`},
		{"negative", "Max locked memory -1 -1 bytes\n", 0, 0, "is not a number"},
		{"empty", "", 0, 0, "no \"Max locked memory\" line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			soft, hard, err := parseMemlockLimit(strings.NewReader(tc.in))
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.soft, soft)
			assert.Equal(t, tc.hard, hard)
		})
	}
}

func FuzzParseMemlockLimit(f *testing.F) {
	f.Add("Max locked memory         8388608              8388608              bytes     \n")
	f.Add("Max locked memory unlimited unlimited bytes\n")
	f.Add("Max locked memory\n")
	f.Fuzz(func(t *testing.T, s string) {
		soft, hard, err := parseMemlockLimit(strings.NewReader(s))
		if err != nil && (soft != 0 || hard != 0) {
			t.Fatalf("values %d, %d with an error", soft, hard)
		}
	})
}

func TestProviderAllowsEFA(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"efa": true, "EFA": true, " efa ": true, "shm,efa": true, "ofi_rxm;efa": true, "": true,
		"tcp": false, "shm": false, "^efa": false, "^tcp,udp": true, "efa-direct": false, "verbs;ofi_rxm": false,
	} {
		assert.Equal(t, want, providerAllowsEFA(in), "%q", in)
	}
}

func TestUverbsRanges(t *testing.T) {
	t.Parallel()
	mk := func(nums ...int) []*verbsDevice {
		var out []*verbsDevice
		for _, n := range nums {
			out = append(out, &verbsDevice{Number: n})
		}
		return out
	}
	assert.Equal(t, "", uverbsRanges(nil))
	assert.Equal(t, "uverbs3", uverbsRanges(mk(3)))
	assert.Equal(t, "uverbs0-uverbs3", uverbsRanges(mk(0, 1, 2, 3)))
	assert.Equal(t, "uverbs0-uverbs1, uverbs4, uverbs10-uverbs11", uverbsRanges(mk(11, 0, 4, 1, 10)))
}

func TestUverbsNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"uverbs0": 0, "uverbs31": 31, "uverbs": -1, "abi_version": -1, "uverbs1a": -1, "uverbs-1": -1} {
		n, ok := uverbsNumber(in)
		if want < 0 {
			assert.False(t, ok, in)
			continue
		}
		assert.True(t, ok, in)
		assert.Equal(t, want, n, in)
	}
}

func TestListNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "a, b", listNames([]string{"a", "b"}, 2))
	assert.Equal(t, "a, b and 2 more", listNames([]string{"a", "b", "c", "d"}, 2))
	assert.Equal(t, "", listNames(nil, 2))
}

func TestCombine(t *testing.T) {
	t.Parallel()
	c := combine("x", part{Skip, "no API", ""}, part{Skip, "no kubelet dir", ""})
	assert.Equal(t, Check{ID: "x", Status: Skip, Message: "no API; no kubelet dir"}, c)
	c = combine("x", part{Pass, "a", ""}, part{Warn, "b", "fix b"}, part{Skip, "c", "unused"}, part{Fail, "d", "fix d"}, part{Warn, "e", "fix b"})
	assert.Equal(t, Check{ID: "x", Status: Fail, Message: "a; b; c; d; e", Fix: "fix b; fix d"}, c)
}

func TestEnvMapKeepsFirst(t *testing.T) {
	t.Parallel()
	m := envMap([]string{"A=1", "B", "A=2", "C="})
	assert.Equal(t, map[string]string{"A": "1", "C": ""}, m)
}

func TestParseDevMounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"container /dev: tmpfs, nodes bind-mounted one by one", "1 0 0:50 / /dev rw - tmpfs tmpfs rw\n2 1 0:5 /infiniband/uverbs0 /dev/infiniband/uverbs0 rw - devtmpfs udev rw\n", nil},
		{"a hostPath of /dev/infiniband", "3 1 0:5 /infiniband /dev/infiniband rw - devtmpfs udev rw\n", []string{"/dev/infiniband is a mount of devtmpfs /infiniband"}},
		{"the node's /dev", "4 0 0:5 / /dev rw - devtmpfs udev rw\n", []string{"/dev is a mount of devtmpfs /"}},
		{"escaped space", "5 0 0:5 /in\\040b /dev/infiniband rw - devtmpfs udev rw\n", []string{"/dev/infiniband is a mount of devtmpfs /in\\040b"}},
		{"no separator", "6 0 0:5 / /dev/infiniband rw devtmpfs udev rw\n", nil},
		{"short", "7 0 /dev - x\n", nil},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseDevMounts(strings.NewReader(tc.in), "/dev")
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseDevMounts(f *testing.F) {
	f.Add("3 1 0:5 /infiniband /dev/infiniband rw - devtmpfs udev rw\n")
	f.Add("4 0 0:5 / /dev rw - devtmpfs udev rw\n")
	f.Add("5 0 0:5 /in\\040b /dev/in\\040finiband rw - tmpfs x rw\n")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseDevMounts(strings.NewReader(s), "/dev")
		if err == nil && len(got) > strings.Count(s, "\n")+1 {
			t.Fatalf("%d mounts from %d lines", len(got), strings.Count(s, "\n")+1)
		}
	})
}

func TestParseCapBnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     uint64
		err      string
	}{
		{"privileged", "Name:\tsh\nCapBnd:\t000001ffffffffff\n", 0x1ffffffffff, ""},
		{"runtime default", "CapBnd:\t00000000a80425fb\n", 0xa80425fb, ""},
		{"no line", "Name:\tsh\n", 0, ""},
		{"garbage", "CapBnd:\tlots\n", 0, `CapBnd "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseCapBnd(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseCapBnd(f *testing.F) {
	f.Add("CapBnd:\t000001ffffffffff\n")
	f.Add("Name:\tsh\n")
	f.Add("CapBnd:\tzz\n")
	f.Fuzz(func(t *testing.T, s string) {
		if set, err := parseCapBnd(s); err != nil && set != 0 {
			t.Fatalf("set %x with an error", set)
		}
	})
}
