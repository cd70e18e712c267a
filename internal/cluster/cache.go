package cluster

import (
	"context"
	"sync"
	"time"
)

// ViewEvery is how often a Member reads the cluster view at most, however
// many readers ask: the registry's pool has two connections, and one of
// them must stay free for the node's own heartbeat.
const ViewEvery = time.Second

// viewTimeout bounds one read of the view; it runs apart from the request
// that started it, so a client that goes away does not fail the others
// waiting on the same read.
const viewTimeout = 5 * time.Second

// viewCache serves the view from memory and reads it again only once the
// copy is older than every: at most one read per interval, and callers that
// arrive while a read is in flight wait for that one. An error is kept like
// a view, so a failing database is not asked more often either.
type viewCache struct {
	read  func(context.Context) (View, error)
	every time.Duration
	reads func() // counts the reads (a metric)

	mu      sync.Mutex
	v       View
	err     error
	readAt  time.Time     // when the last read started; zero: never
	pending chan struct{} // closed when the read in flight ends; nil: none
}

func newViewCache(read func(context.Context) (View, error), every time.Duration, reads func()) *viewCache {
	return &viewCache{read: read, every: every, reads: reads}
}

// get returns the cached view, reading it first when it is older than every
// (or was never read). The View's slices are shared: callers must not
// modify them.
func (c *viewCache) get(ctx context.Context) (View, error) {
	c.mu.Lock()
	if c.pending == nil && (c.readAt.IsZero() || time.Since(c.readAt) >= c.every) {
		c.pending = make(chan struct{})
		c.readAt = time.Now()
		go c.refresh(c.pending) //nolint:gosec // G118: one read serves every waiter, so no caller's context may cancel it
	}
	wait := c.pending
	c.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return View{}, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.v, c.err
}

func (c *viewCache) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), viewTimeout)
	defer cancel()
	if c.reads != nil {
		c.reads()
	}
	v, err := c.read(ctx)
	c.mu.Lock()
	c.v, c.err = v, err
	c.pending = nil
	c.mu.Unlock()
	close(done)
}
