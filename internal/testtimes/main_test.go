package main

import (
	"fmt"
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
	assert.Equal(t, "# building\nq/q_test.go:3:1: syntax error\n    slow_test.go:9: it broke\nFAIL\tp\t96.0s\n\nTests that took 30s or more:\n    95.2s  fail  TestSlow\n    40.0s  fail  TestSlow/sub\n"+
		"\nThe last 20 lines of each failing test's output:\n--- TestSlow/sub\n    slow_test.go:9: it broke\n", out.String())
}

// TestRunRepeatsTheEndOfAFailure: a long failing test's last lines come
// again after the table, without go test's progress lines.
func TestRunRepeatsTheEndOfAFailure(t *testing.T) {
	lines := []string{`{"Action":"output","Package":"p","Test":"TestLong","Output":"=== RUN   TestLong\n"}`}
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"Action":"output","Package":"p","Test":"TestLong","Output":"    long_test.go:%d: line %d\n"}`, i, i))
	}
	lines = append(lines,
		`{"Action":"output","Package":"p","Test":"TestLong","Output":"--- FAIL: TestLong (1.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestLong","Elapsed":1}`,
		`{"Action":"fail","Package":"p","Elapsed":1}`)
	var out strings.Builder
	failed, err := run(strings.NewReader(strings.Join(lines, "\n")), &out, 30*time.Second)
	require.NoError(t, err)
	assert.True(t, failed)
	_, end, ok := strings.Cut(out.String(), "The last 20 lines of each failing test's output:\n")
	require.True(t, ok, out.String())
	want := "--- TestLong\n"
	for i := 10; i < 30; i++ {
		want += fmt.Sprintf("    long_test.go:%d: line %d\n", i, i)
	}
	assert.Equal(t, want, end)
}
