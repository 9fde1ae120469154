package executor

import (
	"sync"
	"time"
)

// fairSlots are the executor's MaxRuns slots, shared fairly among
// tenants: a freed slot goes to the waiting tenant holding the fewest
// slots (the one waiting longest among equals), not to whoever queued
// first. A tenant whose limit alone covers every slot therefore cannot
// keep the others waiting: each tenant with work waiting gets a slot as
// soon as one frees, before a tenant already holding more. A tenant's
// own MaxConcurrentRuns still bounds what it holds.
type fairSlots struct {
	mu      sync.Mutex
	free    int
	held    map[string]int // tenant → slots held
	waiting []*slotWaiter  // in arrival order
}

type slotWaiter struct {
	tenant  string
	ready   chan struct{} // closed when granted
	granted bool
}

func newFairSlots(n int) *fairSlots { return &fairSlots{free: n, held: map[string]int{}} }

// try takes a slot for tenant if one is free now.
func (f *fairSlots) try(tenant string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.free == 0 {
		return false
	}
	f.free--
	f.held[tenant]++
	return true
}

// freeNow is how many slots are free at this moment (a hint: another
// job may take one next).
func (f *fairSlots) freeNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.free
}

// acquire waits for a slot for tenant; false when expire or done came
// first (nothing is held then).
func (f *fairSlots) acquire(tenant string, expire <-chan time.Time, done <-chan struct{}) bool {
	if f.try(tenant) {
		return true
	}
	f.mu.Lock()
	if f.free > 0 { // freed between try and here
		f.free--
		f.held[tenant]++
		f.mu.Unlock()
		return true
	}
	w := &slotWaiter{tenant: tenant, ready: make(chan struct{})}
	f.waiting = append(f.waiting, w)
	f.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-expire:
	case <-done:
	}
	f.mu.Lock()
	if w.granted { // granted as we gave up: hand it on
		f.mu.Unlock()
		f.release(tenant)
		return false
	}
	for i, o := range f.waiting {
		if o == w {
			f.waiting = append(f.waiting[:i], f.waiting[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
	return false
}

// release gives back tenant's slot: to the waiting tenant holding the
// fewest, else to the free pool.
func (f *fairSlots) release(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[tenant]--; f.held[tenant] <= 0 {
		delete(f.held, tenant)
	}
	best := -1
	for i, w := range f.waiting {
		if best < 0 || f.held[w.tenant] < f.held[f.waiting[best].tenant] {
			best = i
		}
	}
	if best < 0 {
		f.free++
		return
	}
	w := f.waiting[best]
	f.waiting = append(f.waiting[:best], f.waiting[best+1:]...)
	f.held[w.tenant]++
	w.granted = true
	close(w.ready)
}
