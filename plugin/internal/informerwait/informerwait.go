// Package informerwait waits for an informer's first list and, when it
// does not come, says why: the informer's last list or watch error (a
// role without list or watch answers 403 at every try, which client-go
// only logs), not only that the wait ran out.
package informerwait

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Informer is an informer not started yet.
type Informer interface {
	SetWatchErrorHandlerWithContext(cache.WatchErrorHandlerWithContext) error
	HasSynced() bool
}

// Tracker keeps the last list or watch error of one informer.
type Tracker struct {
	synced func() bool
	mu     sync.Mutex
	err    error
}

// Track follows inf's list and watch errors (logged as client-go's
// default handler logs them). It must be called before inf runs.
func Track(inf Informer) (*Tracker, error) {
	t := &Tracker{synced: inf.HasSynced}
	err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
	})
	return t, err
}

// Err is the last list or watch error, nil before any.
func (t *Tracker) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Wait waits until the informer has listed, or ctx ends. Then it returns
// an error that says what (the informer's purpose, such as "the watch of
// the Node") has not listed yet, why the wait ended and the last list or
// watch error.
func (t *Tracker) Wait(ctx context.Context, what string) error {
	if cache.WaitForCacheSync(ctx.Done(), t.synced) {
		return nil
	}
	if last := t.Err(); last != nil {
		return fmt.Errorf("%s has not listed yet (%w); its last error: %w", what, context.Cause(ctx), last)
	}
	return fmt.Errorf("%s has not listed yet: %w", what, context.Cause(ctx))
}
