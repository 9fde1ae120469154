package glovebox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// RequireApproval marks the named tools as needing a person's approval:
// before each of their calls runs, [Hooks].Approver decides, and a denied
// call raises Glovebox::ToolDenied in the guest. It is the same as
// setting [ToolDoc].NeedsApproval when describing them. It fails with
// [ErrInvalidTool] for a name no tool has, leaving s unchanged.
func (s *Toolset) RequireApproval(names ...string) error {
	for _, n := range names {
		if _, ok := s.tools[n]; !ok {
			return fmt.Errorf("%w: RequireApproval(%q): no tool has that name; register it first", ErrInvalidTool, n)
		}
	}
	for _, n := range names {
		s.markApproval(n)
	}
	return nil
}

func (s *Toolset) markApproval(name string) {
	if s.approval == nil {
		s.approval = map[string]bool{}
	}
	s.approval[name] = true
}

// approvalSet returns the tools of s that need approval, and marks their
// docs (one per tool, as allDocs made them) NeedsApproval.
func approvalSet(s *Toolset, docs []ToolDoc) map[string]bool {
	set := map[string]bool{}
	for i := range docs {
		if docs[i].NeedsApproval || s.approval[docs[i].Name] {
			docs[i].NeedsApproval = true
			set[docs[i].Name] = true
		}
	}
	return set
}

// approve asks the Approver about call c and reports the reason for a
// denial, or ok. The eval's clock stands still meanwhile (c's deadline
// moves later by the time waited); the wait ends at the decision,
// Limits.ApprovalTimeout, or ctx's end, whichever comes first. A call
// whose clock cannot stand still (a ToolSession's: its deadline is
// fixed) waits until its deadline at most; the caller then finds its
// eval over (evalState.over) and does not run the tool. The Approver
// runs on its own goroutine so one that ignores its context cannot hold
// the eval past that bound.
func (st *evalState) approve(ctx context.Context, c *engine.Call, args Args) (reason string, ok bool) {
	r := st.r
	if r.hooks.Approver == nil {
		return fmt.Sprintf("%s needs a person's approval, and this sandbox has no approver", c.Name), false
	}
	if c.Hold != nil {
		resume := c.Hold()
		defer func() { c.Deadline = resume() }()
	}
	wait := r.limits.ApprovalTimeout
	end := time.Now().Add(wait)
	if c.Hold == nil && c.Deadline.Before(end) {
		end = c.Deadline
	}
	actx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	decided := make(chan error, 1)
	// The goroutine may outlive the call (an Approver that ignores its
	// context), and the engine reuses c for the VM's next call: it gets
	// the name, not c.
	name := c.Name
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("glovebox: Approver panicked", "tool", name, "panic", p, "stack", string(debug.Stack()))
				decided <- fmt.Errorf("the approver failed")
			}
		}()
		decided <- r.hooks.Approver(actx, name, args)
	}()
	var err error
	got := false
	select {
	case err = <-decided:
		got = true
	case <-actx.Done():
	}
	switch {
	case ctx.Err() != nil:
		return "the eval was canceled while waiting for approval", false
	case got && err == nil:
		return "", true
	case got && errors.Is(err, ErrSuspend):
		st.approverSuspend = err // the caller suspends the call (suspend_eval.go)
		return "", false
	case actx.Err() != nil:
		return fmt.Sprintf("no decision within %v", wait.Round(time.Millisecond)), false
	case err.Error() == "":
		return "denied", false
	}
	return err.Error(), false
}
