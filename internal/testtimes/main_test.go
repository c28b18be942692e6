package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun: a passing test's output is dropped, a failing one's printed,
// the package lines kept, and the slow tests listed slowest first.
func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`# building`,
		`{"ImportPath":"q.test","Action":"build-output","Output":"q/q_test.go:3:1: syntax error\n"}`,
		`{"ImportPath":"q.test","Action":"build-fail"}`,
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestFast"}`,
		`{"Action":"output","Package":"p","Test":"TestFast","Output":"=== RUN   TestFast\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestFast","Elapsed":0.5}`,
		`{"Action":"output","Package":"p","Test":"TestSlow/sub","Output":"    slow_test.go:9: it broke\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestSlow/sub","Elapsed":40}`,
		`{"Action":"fail","Package":"p","Test":"TestSlow","Elapsed":95.25}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t96.0s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":96}`,
	}, "\n")
	var out strings.Builder
	failed, err := run(strings.NewReader(in), &out, 30*time.Second)
	require.NoError(t, err)
	assert.True(t, failed)
	assert.Equal(t, "# building\nq/q_test.go:3:1: syntax error\n    slow_test.go:9: it broke\nFAIL\tp\t96.0s\n\nTests that took 30s or more:\n    95.2s  fail  TestSlow\n    40.0s  fail  TestSlow/sub\n", out.String())
}
