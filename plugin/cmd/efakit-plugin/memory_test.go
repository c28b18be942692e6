package main

import (
	"bufio"
	"errors"
	"math"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A /proc/<pid>/maps of a static Go binary, with what else a process maps.
const mapsText = `00400000-01b52000 r-xp 00000000 fe:00 1069 /usr/local/bin/efakit-plugin
01b52000-03655000 r--p 01752000 fe:00 1069 /usr/local/bin/efakit-plugin
03655000-036e7000 rw-p 03255000 fe:00 1069 /usr/local/bin/efakit-plugin
036e7000-05733000 rw-p 00000000 00:00 0
190abd800000-190abe400000 rw-p 00000000 00:00 0
7fc464b10000-7fc464f00000 rw-p 00000000 00:00 0                          [heap]
7fc4ab9af000-7fc4ab9b1000 r-xp 00000000 00:00 0                          [vdso]
7fff17947000-7fff17968000 rw-p 00000000 00:00 0                          [stack]
`

func TestParseMaps(t *testing.T) {
	t.Parallel()
	got, err := parseMaps(strings.NewReader(mapsText))
	require.NoError(t, err)
	require.Len(t, got, 8)
	assert.Equal(t, mapping{start: 0x400000, end: 0x1b52000, perms: "r-xp", path: "/usr/local/bin/efakit-plugin"}, got[0])
	assert.Equal(t, mapping{start: 0x36e7000, end: 0x5733000, perms: "rw-p"}, got[3])
	assert.Equal(t, mapping{start: 0x7fc464b10000, end: 0x7fc464f00000, perms: "rw-p", path: "[heap]"}, got[5])

	for _, tc := range []struct{ name, in, want string }{
		{"path with spaces", "1000-2000 r-xp 00000000 fe:00 7   /opt/my tools/plugin (deleted)\n", "/opt/my tools/plugin (deleted)"},
		{"tabs", "1000-2000\tr--p\t0\tfe:00\t7\t/bin/x\n", "/bin/x"},
	} {
		got, err := parseMaps(strings.NewReader(tc.in))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got[0].path, tc.name)
	}
	for _, tc := range []struct{ name, in, err string }{
		{"four fields", "00400000-01b52000 r-xp 00000000 fe:00\n", `line 1: "00400000-01b52000 r-xp 00000000 fe:00": want at least 5 fields`},
		{"no range", "00400000 r-xp 00000000 fe:00 1 /x\n", `line 1: "00400000" is not an address range`},
		{"not hex", "1000-20g0 r-xp 0 fe:00 1 /x\n", `line 1: "1000-20g0" is not an address range`},
		{"empty range", "2000-2000 r-xp 0 fe:00 1 /x\n", `line 1: "2000-2000" is not an address range`},
		{"backwards", "3000-2000 r-xp 0 fe:00 1 /x\n", `line 1: "3000-2000" is not an address range`},
		{"perms", "1000-2000 rx 0 fe:00 1 /x\n", `line 1: "rx" is not a permission set`},
		{"second line", "1000-2000 r-xp 0 fe:00 1 /x\n\n", `line 2: "": want at least 5 fields`},
	} {
		got, err := parseMaps(strings.NewReader(tc.in))
		assert.EqualError(t, err, tc.err, tc.name)
		assert.Nil(t, got, tc.name)
	}
}

func TestImageMappings(t *testing.T) {
	t.Parallel()
	maps, err := parseMaps(strings.NewReader(mapsText))
	require.NoError(t, err)
	want := []mapping{
		{start: 0x400000, end: 0x1b52000, perms: "r-xp", path: "/usr/local/bin/efakit-plugin"},
		{start: 0x1b52000, end: 0x3655000, perms: "r--p", path: "/usr/local/bin/efakit-plugin"},
	}
	assert.Equal(t, want, imageMappings(maps, 0x498e60), "code, read-only data; not the writable data")
	assert.Equal(t, want, imageMappings(maps, 0x1b52000), "found from any of its mappings")
	assert.Nil(t, imageMappings(maps, 0x3fffff), "a pc outside every mapping")
	assert.Nil(t, imageMappings(maps, 0x190abd800000), "an anonymous mapping")
	assert.Nil(t, imageMappings(maps, 0x7fc4ab9af000), "the vdso")
}

// TestLimitMemory: without GOMEMLIMIT the default limit is set; with it,
// the runtime's (set from the variable at start) is kept.
func TestLimitMemory(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	debug.SetMemoryLimit(math.MaxInt64)
	assert.Equal(t, int64(defaultMemoryLimit), limitMemory(func(string) string { return "" }))
	assert.Equal(t, int64(defaultMemoryLimit), debug.SetMemoryLimit(-1))

	debug.SetMemoryLimit(40 << 20) // as the runtime does for GOMEMLIMIT=40MiB
	env := map[string]string{"GOMEMLIMIT": "40MiB"}
	assert.Equal(t, int64(40<<20), limitMemory(func(k string) string { return env[k] }))
	assert.Equal(t, int64(40<<20), debug.SetMemoryLimit(-1))
}

// rssFile is RssFile of /proc/self/status, in kB.
func rssFile(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseStartupPages gives back the test binary's own pages: its
// resident file pages shrink (here from 34-47 MB to 4.4-5.1 MB, with and
// without -race).
func TestReleaseStartupPages(t *testing.T) {
	// go test has just written the binary; the kernel drops only pages
	// that are on disk.
	exe, err := os.Open("/proc/self/exe")
	require.NoError(t, err)
	require.NoError(t, exe.Sync())
	exe.Close()

	before := rssFile(t)
	n, err := releaseStartupPages("/proc/self/maps", reflect.ValueOf(releaseStartupPages).Pointer())
	if errors.Is(err, syscall.EINVAL) {
		t.Skip("MADV_PAGEOUT needs Linux 5.4:", err)
	}
	require.NoError(t, err)
	after := rssFile(t)
	t.Logf("advised %d MiB; RssFile %d kB -> %d kB", n>>20, before, after)
	assert.Positive(t, n)
	assert.Less(t, after, before/2, "RssFile at least halved")

	_, err = releaseStartupPages("/proc/self/no-such-file", 0)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = releaseStartupPages("/proc/self/maps", 0)
	assert.EqualError(t, err, "/proc/self/maps: no file mapping holds the plugin's code")
}

func FuzzParseMaps(f *testing.F) {
	f.Add(mapsText)
	f.Add("1000-2000 r-xp 00000000 fe:00 7   /opt/my tools/plugin (deleted)\n")
	f.Add("1000-2000\tr--p\t0\tfe:00\t7\t/bin/x\n")
	f.Add("3000-2000 r-xp 0 fe:00 1 /x\n")
	f.Add("ffffffffffffffff-10000000000000000 r-xp 0 fe:00 1 /x\n")
	f.Add("1000-2000 r\u00a0xp 0 fe:00 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := parseMaps(strings.NewReader(s))
		if err != nil {
			if maps != nil {
				t.Fatalf("mappings with an error: %v", maps)
			}
			return
		}
		for _, m := range maps {
			if m.start >= m.end || len(m.perms) != 4 {
				t.Fatalf("bad mapping %+v from %q", m, s)
			}
		}
		imageMappings(maps, 0x1000)
	})
}
