package driver

import (
	"testing"
	"testing/synctest"
	"time"

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

// TestRescansLater: a delayed request waits for its time, the earliest
// wins, and it then joins the requests now.
func TestRescansLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newRescans()
		assert.Nil(t, q.next(), "nothing delayed")
		q.askAfter(5*time.Second, rescanOwnerWait)
		q.askAfter(time.Minute, rescanAPI)
		assert.Len(t, q.ready, 1, "Run wakes to wait for the new time")
		<-q.ready
		assert.Empty(t, q.take(), "not due yet")
		start := time.Now()
		<-q.next()
		assert.Equal(t, 5*time.Second, time.Since(start), "the earliest request")
		q.due()
		assert.Equal(t, []rescanReason{rescanOwnerWait}, q.take())
		assert.Nil(t, q.next(), "one delayed request at a time, taken once")
	})
}

// TestRescansRound: a request's round ends when the scan that took it is
// served, not one taken before it.
func TestRescansRound(t *testing.T) {
	q := newRescans()
	first := q.askWait(rescanHealth)
	assert.Equal(t, []rescanReason{rescanHealth}, q.take())
	second := q.askWait(rescanHealth) // made while the first scan runs
	q.served()
	select {
	case <-first:
	default:
		t.Fatal("the first round is not over after its scan")
	}
	select {
	case <-second:
		t.Fatal("a request made during a scan is served by that scan")
	default:
	}
	assert.False(t, anyRecheck(q.take()), "a health scan reads sysfs only")
	q.served()
	<-second
}
