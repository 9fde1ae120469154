package glovebox

import (
	"context"
	"sync"
	"time"
)

// toolContext is the context a tool call runs with: it ends at deadline,
// when its parent (the eval's context) ends, or when the call returns,
// like context.WithDeadline. Unlike it, it starts no timer and registers
// nothing with the parent until the tool asks for Done: most tools never
// do, and a call then costs one small allocation instead of a timer set
// and stopped (measured a few hundred nanoseconds a call here, a large
// part of a round trip). Err and Deadline answer without Done.
type toolContext struct {
	parent   context.Context
	deadline time.Time
	flow     flowCall // the call's data-flow state, for CheckOutbound

	mu    sync.Mutex
	done  chan struct{} // made by the first Done
	err   error         // set once the context has ended
	timer *time.Timer   // fires at deadline, once Done was asked for
	stop  func() bool   // unregisters from parent, once Done was asked for
}

var _ context.Context = (*toolContext)(nil)

func newToolContext(parent context.Context, deadline time.Time) *toolContext {
	return &toolContext{parent: parent, deadline: deadline}
}

func (c *toolContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *toolContext) Value(key any) any {
	if _, ok := key.(flowKey); ok && c.flow.f != nil {
		return c.flow
	}
	return c.parent.Value(key)
}

func (c *toolContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err == nil {
		c.err = c.errNow()
	}
	if c.err != nil {
		close(c.done)
		return c.done
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
	c.stop = context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	return c.done
}

// errNow is the context's error as of now, before it is recorded.
func (c *toolContext) errNow() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *toolContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = c.errNow()
		if c.err != nil && c.done != nil {
			c.release()
		}
	}
	return c.err
}

// cancel ends the context with err, unless it already ended.
func (c *toolContext) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	if c.done != nil {
		c.release()
	}
}

// release closes done (once) and stops the timer and the parent's
// callback; c.mu is held and c.done is set.
func (c *toolContext) release() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
}

// end ends the context when its call returns: context.Canceled, as
// context.WithDeadline's cancel function gives, unless it ended before.
func (c *toolContext) end() { c.cancel(context.Canceled) }
