package driver

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRunStopOrder: stop cancels first, undoes what was registered in
// reverse order, and waits for the goroutines where the wait was
// registered: after the stops registered later, before the earlier ones.
func TestRunStopOrder(t *testing.T) {
	r := newRun(context.Background())
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	r.onStop(func() { note("sysfs root closed") })
	r.onStop(func() {
		r.wg.Wait()
		note("goroutines waited for")
	})
	r.spawn(func() {
		<-r.ctx.Done()
		note("watch ended")
	})
	r.onStop(func() {
		assert.Error(t, r.ctx.Err(), "the context is cancelled before any stop")
		note("helper stopped")
	})
	r.stop()
	// The watch ends with the context, so before or after the helper's
	// stop; the wait is after both.
	assert.Len(t, order, 4)
	assert.Equal(t, []string{"goroutines waited for", "sysfs root closed"}, order[2:])
	assert.ElementsMatch(t, []string{"helper stopped", "watch ended"}, order[:2])
}
