package glovebox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// the machine's first use, 20 s to a few minutes on 2 cores (13-137 s
// measured under other load) — the first time one of its views with a
// budget evaluates. That compile is logged at Warn level; an eval waits for
// it at most its Timeout and then ends with StatusTimeout saying so, while
// the compile goes on for the evals after it. `glovebox setup` compiles
// both variants ahead of time.

// altEngine is the metered engine and pool of a Runtime whose own engine
// is unmetered, made on first use.
type altEngine struct {
	mu       sync.Mutex
	sh       *shared   // nil until made
	build    *altBuild // the opening under way; nil when none
	closed   bool
	cfg      engine.Config
	poolSize int
	names    []string
	mounts   []engine.Mount
	scratch  string
	noReuse  bool
	group    uint64 // Config.ReuseGroup's memory group
}

// altBuild is one opening of the metered engine. It runs on a goroutine of
// its own, so that a caller who stops waiting (its eval's Timeout, its
// context) leaves the compile to finish for the evals after it.
type altBuild struct {
	done      chan struct{} // closed when sh or err is set
	compiling atomic.Bool   // the engine reported compiling (not just loading its cache)
	sh        *shared
	err       error
}

// altWait is target's error when a caller stopped waiting for the metered
// engine: its eval's Timeout passed (timeout) or its context ended.
type altWait struct {
	compiling bool          // the image was being compiled, not just loaded
	waited    time.Duration // how long the caller waited
	limit     time.Duration // with timeout, the eval's Timeout
	timeout   bool
	cause     error // with !timeout, the context's error
}

func (w *altWait) Error() string {
	what := "loading the fuel-metered Ruby image from the cache"
	if w.compiling {
		what = "compiling the fuel-metered Ruby image, which evals with a fuel budget run " +
			"(once per machine and glovebox version: 20 s to a few minutes on 2 cores)"
	}
	why := fmt.Sprintf("its context ended (%v)", w.cause)
	if w.timeout {
		why = fmt.Sprintf("its %v wall-clock limit passed", w.limit)
	}
	msg := fmt.Sprintf("the eval did not run: %s after %.1fs waiting for glovebox to finish %s", why, w.waited.Seconds(), what)
	if w.compiling {
		msg += "; the compile goes on, and later evals use it. Run `glovebox setup` (Glovebox.setup from Ruby) " +
			"beforehand, as part of installing the app, so that no eval waits for it"
	}
	return msg
}

func (w *altWait) Unwrap() error { return w.cause }

// result is the Result of an eval that stopped waiting: StatusTimeout or
// StatusCanceled, with the reason as its error.
func (w *altWait) result() *Result {
	st, class := StatusCanceled, "Glovebox::Canceled"
	if w.timeout {
		st, class = StatusTimeout, "Glovebox::Timeout"
	}
	return &Result{Status: st, Duration: w.waited, Error: &GuestError{Class: class, Message: w.Error(), Backtrace: []string{}}}
}

// target returns the engine and pool that r's evals run on: r's own, or,
// for a view with a fuel budget of an unmetered Runtime, the metered one,
// opening it on first use (compiling it on the machine's first, which
// it logs at Warn level). wait bounds how long it waits for that (zero:
// until ctx ends); past it, or when ctx ends first, the error is an
// *altWait saying what it waited for. It fails with ErrClosed once r is
// closed.
func (r *Runtime) target(ctx context.Context, wait time.Duration) (*shared, error) {
	if r.closed() {
		return nil, ErrClosed
	}
	if r.limits.Fuel == 0 || r.shared.metered {
		return r.shared, nil
	}
	return r.shared.alt.get(ctx, r.log, wait)
}

func (a *altEngine) get(ctx context.Context, log *slog.Logger, wait time.Duration) (*shared, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if a.sh != nil {
		sh := a.sh
		a.mu.Unlock()
		return sh, nil
	}
	b := a.build
	if b == nil {
		b = &altBuild{done: make(chan struct{})}
		a.build = b
		go a.open(b, log)
	}
	a.mu.Unlock()

	start := time.Now()
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-b.done:
		return b.sh, b.err
	case <-deadline:
		return nil, &altWait{compiling: b.compiling.Load(), waited: time.Since(start), limit: wait, timeout: true}
	case <-ctx.Done():
		return nil, &altWait{compiling: b.compiling.Load(), waited: time.Since(start), cause: ctx.Err()}
	}
}

// open opens the metered engine for b, with no deadline: the callers
// waiting may give up, the compile does not. When the Runtime closed
// meanwhile, what it made is closed.
func (a *altEngine) open(b *altBuild, log *slog.Logger) {
	cfg := a.cfg
	cfg.NoFuel = false
	progress := cfg.Progress
	cfg.Progress = func(step string) func() {
		if strings.HasPrefix(step, "compiling") {
			b.compiling.Store(true)
			log.Warn("glovebox: an eval with a fuel budget waits while the fuel-metered Ruby image compiles " +
				"(first use on this machine: 20 s to a few minutes on 2 cores); `glovebox setup` compiles it ahead of time")
		}
		if progress == nil {
			return func() {}
		}
		return progress(step)
	}
	sh, err := openAlt(context.Background(), cfg)
	if err == nil {
		if sh.pool, err = sh.eng.Load().NewPool(context.Background(), a.poolSize, a.names, a.mounts, a.scratch); err != nil {
			sh.close()
		} else if a.noReuse {
			sh.pool.DisableReuse()
		} else if a.group != 0 {
			sh.pool.SetMemoryGroup(a.group)
		}
	}
	a.mu.Lock()
	switch {
	case err != nil:
		a.build = nil // the next eval tries again
	case a.closed:
		sh.close()
		sh, err = nil, ErrClosed
	default:
		a.sh, a.build = sh, nil
	}
	a.mu.Unlock()
	b.sh, b.err = sh, err
	close(b.done)
}

// openAlt opens the metered engine; tests replace it to stand in for a
// slow compile.
var openAlt = acquire

// close marks a closed and returns its engine state for the caller to
// close, if one was made. An opening under way closes what it made when
// it ends.
func (a *altEngine) close() *shared {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	sh := a.sh
	a.sh = nil
	return sh
}
