package driver

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRescansJoin: requests made while one waits join it, each reason
// once, in the order first asked; only uevents and health scans skip the
// owner check.
func TestRescansJoin(t *testing.T) {
	q := newRescanQueue()
	defer q.ShutDown()
	q.Add(rescanUevent)
	q.Add(rescanUevent)
	assert.Equal(t, 1, q.Len(), "one request for any number of asks")
	got, ok := take(q)
	assert.True(t, ok)
	assert.Equal(t, []rescanReason{rescanUevent}, got)
	assert.False(t, anyRecheck(got), "a uevent reads sysfs only")
	done(q, got)
	q.Add(rescanUevent)
	q.Add(rescanPrepare)
	q.Add(rescanUevent)
	got, _ = take(q)
	assert.Equal(t, []rescanReason{rescanUevent, rescanPrepare}, got)
	assert.True(t, anyRecheck(got), "a prepare's scan checks the owner too")
	assert.Zero(t, q.Len(), "taken once")
	done(q, got)
	assert.False(t, anyRecheck([]rescanReason{rescanHealth, rescanUevent}), "a health scan reads sysfs only")
}

// TestRescansDuringScan: a request made while a scan of the same reason
// runs is served by the next scan, not lost in the one under way.
func TestRescansDuringScan(t *testing.T) {
	q := newRescanQueue()
	defer q.ShutDown()
	q.Add(rescanHealth)
	got, _ := take(q)
	q.Add(rescanHealth) // made during the scan
	assert.Zero(t, q.Len(), "not queued beside the scan that runs")
	done(q, got)
	assert.Equal(t, 1, q.Len(), "queued again once that scan is done")
	got, _ = take(q)
	assert.Equal(t, []rescanReason{rescanHealth}, got)
	done(q, got)
}

// TestRescansLater: a delayed request waits for its time, the earliest
// wins, and it then joins the requests now.
func TestRescansLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newRescanQueue()
		defer q.ShutDown()
		start := time.Now()
		q.AddAfter(rescanOwnerWait, time.Minute)
		q.AddAfter(rescanOwnerWait, 5*time.Second)
		q.AddAfter(rescanAPI, time.Hour)
		got, ok := take(q)
		assert.True(t, ok)
		assert.Equal(t, 5*time.Second, time.Since(start), "the earliest request of a reason")
		assert.Equal(t, []rescanReason{rescanOwnerWait}, got)
		done(q, got)
		q.ShutDown()
		_, ok = take(q)
		assert.False(t, ok, "shut down")
	})
}
