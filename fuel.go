package glovebox

import (
	"context"
	"sync"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// Why two compiled variants of the guest: the metered one counts fuel with
// code inserted into every loop head and every function that loops or
// calls (internal/wasmbin.PatchFuel; wasmtime's own fuel cost more, see
// RATIONALE.md), and that code costs time whether or not an eval has a
// budget (glovebox bench: about +5% on a 1M-iteration while loop). So an
// eval without a fuel budget runs the guest as it is, and only evals with
// a budget run the metered variant. Both are compiled once and cached on
// disk side by side (each about 75-90 MB, with its own boot snapshot); the
// epoch deadline bounds every eval's wall-clock time in both.
//
// A Runtime made with a fuel budget uses the metered engine alone (its
// views cannot drop the budget: a zero field inherits). One made without
// uses the unmetered engine, and opens the metered one — compiling it on
// the machine's first use, 20 s to a minute on 2 cores — the first time one
// of its views with a budget evaluates.

// altEngine is the metered engine and pool of a Runtime whose own engine
// is unmetered, made on first use.
type altEngine struct {
	mu       sync.Mutex
	sh       *shared // nil until made
	closed   bool
	cfg      engine.Config
	poolSize int
	names    []string
	mounts   []engine.Mount
	scratch  string
	noReuse  bool
}

// target returns the engine and pool that r's evals run on: r's own, or,
// for a view with a fuel budget of an unmetered Runtime, the metered one.
// It fails with ErrClosed once r is closed.
func (r *Runtime) target(ctx context.Context) (*shared, error) {
	if r.closed() {
		return nil, ErrClosed
	}
	if r.limits.Fuel == 0 || r.shared.metered {
		return r.shared, nil
	}
	return r.shared.alt.get(ctx)
}

func (a *altEngine) get(ctx context.Context) (*shared, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	if a.sh != nil {
		return a.sh, nil
	}
	cfg := a.cfg
	cfg.NoFuel = false
	sh, err := acquire(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if sh.pool, err = sh.eng.Load().NewPool(ctx, a.poolSize, a.names, a.mounts, a.scratch); err != nil {
		sh.close()
		return nil, err
	}
	if a.noReuse {
		sh.pool.DisableReuse()
	}
	a.sh = sh
	return sh, nil
}

// close marks a closed and returns its engine state for the caller to
// close, if one was made.
func (a *altEngine) close() *shared {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	sh := a.sh
	a.sh = nil
	return sh
}
