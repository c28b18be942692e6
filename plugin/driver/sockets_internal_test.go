package driver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leftSocket makes a socket at path that nothing listens on any more, as a
// killed process leaves it.
func leftSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
}

// servedSocket makes a socket at path that a process serves until the test
// ends.
func servedSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// TestRemoveStaleSockets: at start, the plugin removes this driver's
// registration and DRA sockets that no process answers on, and nothing
// else: not a socket a rolling update's other pod serves, not another
// driver's, not a file that is no socket, not a name that does not say
// whose it is.
func TestRemoveStaleSockets(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "sock") // short: unix socket paths are limited to 108 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	reg, data := filepath.Join(dir, "reg"), filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(reg, 0o755))
	require.NoError(t, os.MkdirAll(data, 0o755))
	at := func(d, name string) string { return filepath.Join(d, name) }

	for _, p := range []string{
		at(reg, "dra.net-11111111-1111-1111-1111-111111111111-reg.sock"), // SIGKILLed pod
		at(reg, "dra.net-reg.sock"),                                      // before rolling updates
		at(data, "dra-11111111-1111-1111-1111-111111111111.sock"),
		at(data, "dra.sock"),
		at(reg, "gpu.nvidia.com-33333333-3333-3333-3333-333333333333-reg.sock"), // another driver's
		at(reg, "dra-q1w2e3r4t5y6u7i8o9p0aa-reg.sock"),                          // no driver in the name
	} {
		leftSocket(t, p)
	}
	servedSocket(t, at(reg, "dra.net-22222222-2222-2222-2222-222222222222-reg.sock")) // the pod being replaced
	servedSocket(t, at(data, "dra-22222222-2222-2222-2222-222222222222.sock"))
	require.NoError(t, os.WriteFile(at(reg, "dra.net-notes-reg.sock"), []byte("not a socket"), 0o644))

	removed := removeStaleSockets(context.Background(), reg, data, "dra.net")
	assert.ElementsMatch(t, []string{
		at(reg, "dra.net-11111111-1111-1111-1111-111111111111-reg.sock"),
		at(reg, "dra.net-reg.sock"),
		at(data, "dra-11111111-1111-1111-1111-111111111111.sock"),
		at(data, "dra.sock"),
	}, removed)
	var left []string
	for _, d := range []string{reg, data} {
		es, err := os.ReadDir(d)
		require.NoError(t, err)
		for _, e := range es {
			left = append(left, e.Name())
		}
	}
	assert.ElementsMatch(t, []string{
		"gpu.nvidia.com-33333333-3333-3333-3333-333333333333-reg.sock",
		"dra-q1w2e3r4t5y6u7i8o9p0aa-reg.sock",
		"dra.net-22222222-2222-2222-2222-222222222222-reg.sock",
		"dra-22222222-2222-2222-2222-222222222222.sock",
		"dra.net-notes-reg.sock",
	}, left)
	assert.Empty(t, removeStaleSockets(context.Background(), reg, data, "dra.net"), "nothing left to remove")
}
