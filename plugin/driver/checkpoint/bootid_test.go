package checkpoint_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

func TestReadBootID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		content string
		want    string // "" for an error
	}{
		{boot1 + "\n", boot1},
		{boot1, boot1},
		{strings.ToUpper(boot1) + "\n", boot1},
		{"", ""},
		{"\n", ""},
		{"garbage\n", ""},
		{boot1[:35] + "\n", ""},
		{boot1 + "0\n", ""},
		{strings.Replace(boot1, "-", "x", 1), ""},
		{strings.Replace(boot1, "0", "g", 1), ""},
		{boot1 + "\n" + boot2 + "\n", ""},
		{strings.Repeat("a", 4096), ""},
	} {
		proc := t.TempDir()
		p := filepath.Join(proc, "sys", "kernel", "random", "boot_id")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(tc.content), 0o444))
		got, err := checkpoint.ReadBootID(proc)
		if tc.want == "" {
			assert.Error(t, err, "%q", tc.content)
			continue
		}
		require.NoError(t, err, "%q", tc.content)
		assert.Equal(t, tc.want, got)
	}
	_, err := checkpoint.ReadBootID(t.TempDir())
	assert.Error(t, err, "missing file")
}

// TestReadBootIDLive reads this machine's boot ID, where there is one.
func TestReadBootIDLive(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("no /proc boot ID:", err)
	}
	id, err := checkpoint.ReadBootID("/proc")
	require.NoError(t, err)
	assert.Len(t, id, 36)
}
