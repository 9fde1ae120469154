package executor

import (
	"testing"
	"time"
)

// TestFairSlotsServeTheTenantHoldingFewest: tenant a holds both slots
// and has three jobs waiting before b's one; the first slot freed goes
// to b (holding none), not to a's earliest waiter, and the next one back
// to a. A waiter that gives up holds nothing.
func TestFairSlotsServeTheTenantHoldingFewest(t *testing.T) {
	f := newFairSlots(2)
	if !f.try("a") || !f.try("a") || f.try("b") {
		t.Fatal("try: want two slots for a, none left for b")
	}
	got := make(chan string, 8)
	wait := func(tenant string) {
		n := f.waiters()
		go func() {
			if f.acquire(tenant, nil, nil) {
				got <- tenant
			}
		}()
		for f.waiters() == n { // registered before the next arrives
			time.Sleep(time.Millisecond)
		}
	}
	wait("a")
	wait("a")
	wait("a")
	wait("b")
	f.release("a")
	if g := <-got; g != "b" {
		t.Fatalf("first freed slot went to %s, want b (a holds 1, b none)", g)
	}
	f.release("a")
	if g := <-got; g != "a" {
		t.Fatalf("second freed slot went to %s, want a", g)
	}
	done := make(chan struct{})
	close(done)
	if f.acquire("c", nil, done) {
		t.Error("a waiter whose context ended got a slot")
	}
	f.release("b")
	f.release("a")
	if g := <-got; g != "a" {
		t.Fatalf("third freed slot went to %s, want a's last waiter", g)
	}
	f.release("a")
	if f.free != 1 || len(f.held) != 1 {
		t.Errorf("after releases: %d free, held %v", f.free, f.held)
	}
}

// waiters counts the waiting acquires (tests).
func (f *fairSlots) waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiting)
}
