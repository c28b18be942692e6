package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUeventsFlag: the plugin watches the kernel's uevents unless
// --uevents=false.
func TestUeventsFlag(t *testing.T) {
	t.Parallel()
	o, code, ok := parseArgs([]string{"--node-name", "n1"}, io.Discard, io.Discard)
	require.True(t, ok, code)
	assert.NotNil(t, o.serve.Uevents)
	o, code, ok = parseArgs([]string{"--node-name", "n1", "--uevents=false"}, io.Discard, io.Discard)
	require.True(t, ok, code)
	assert.Nil(t, o.serve.Uevents)
}
