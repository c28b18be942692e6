package driver

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRescansJoin: requests made while one waits join it, each reason
// once, in the order first asked; only a uevent alone skips the owner
// check.
func TestRescansJoin(t *testing.T) {
	q := newRescans()
	assert.Empty(t, q.take())
	q.ask(rescanUevent)
	q.ask(rescanUevent)
	assert.Len(t, q.ready, 1, "one token for any number of requests")
	got := q.take()
	assert.Equal(t, []rescanReason{rescanUevent}, got)
	assert.False(t, anyRecheck(got), "a uevent reads sysfs only")
	q.ask(rescanUevent)
	q.ask(rescanPrepare)
	q.ask(rescanUevent)
	got = q.take()
	assert.Equal(t, []rescanReason{rescanUevent, rescanPrepare}, got)
	assert.True(t, anyRecheck(got), "a prepare's scan checks the owner too")
	assert.Empty(t, q.take(), "taken once")
}
