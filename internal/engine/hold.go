package engine

import (
	"sync"
	"time"
)

// This file is the engine's one hook for a tool call that waits on
// something outside the eval's control — a person approving the call. While
// the call is held, the eval's wall clock stands still: the time until
// resume is added to the deadline, so waiting for a decision does not use
// up the eval's Timeout. The caller's context still ends the eval.

// holdClock stops v's wall clock; the function it returns restarts it and
// returns the eval's new deadline. Both run on the VM's goroutine, inside
// the tool call (Call.Hold); calling resume more than once is harmless.
func (v *VM) holdClock() (resume func() time.Time) {
	start := time.Now()
	v.held.Store(true)
	var once sync.Once
	return func() time.Time {
		once.Do(func() {
			d := time.Since(start)
			v.deadline = v.deadline.Add(d)
			v.extended.Add(int64(d))
			v.held.Store(false)
		})
		return v.deadline
	}
}

// untilDue reports how much longer Eval should wait, from its start, for
// a VM allowed limit of wall-clock time plus whatever its tool calls were
// held: zero when that time has passed, a short recheck while a call is
// held now.
func (v *VM) untilDue(start time.Time, limit time.Duration) time.Duration {
	if v.held.Load() {
		return abandonGrace
	}
	return max(time.Until(start.Add(limit+time.Duration(v.extended.Load()))), 0)
}
