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
// uses the unmetered engine, and opens the metered one the first time one
// of its views with a budget evaluates: from the cache, else from the
// module shipped beside the binary (a platform gem, a release archive),
// else compiling it (20 s to a few minutes on 2 cores; 13-137 s measured
// under other load), then booting its snapshot for the Runtime's mount
// layout unless cached (seconds).
//
// One-time preparation never counts against an eval's timeout (the same
// rule as New's compile and snapshot, which come before any eval): the
// eval waits for it, each slow step logged at Warn naming it and what
// prepares it ahead of time, then runs with its whole Timeout. Only the
// eval's context bounds the wait; an eval whose context ends first ends
// StatusCanceled with an error naming the step it waited for, and the
// step goes on for the evals after it. `glovebox setup` prepares both
// variants (and, with --mount, a layout's snapshots) ahead of time.

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
	done chan struct{}          // closed when sh or err is set
	step atomic.Pointer[string] // the slow step under way, as the engine reported it; nil when none was
	sh   *shared
	err  error
}

// altWait is target's error when an eval's context ended while it
// waited for the metered engine.
type altWait struct {
	step   string        // the step it waited for ("" when none was reported: loading from the cache)
	prep   string        // what prepares that step ahead of time
	waited time.Duration // how long the eval waited
	cause  error         // the context's error
}

func (w *altWait) Error() string {
	what := "loading the fuel-metered Ruby image from the cache"
	if w.step != "" {
		what = w.step
	}
	msg := fmt.Sprintf("the eval did not run: its context ended (%v) after %.1fs waiting for glovebox to finish %s, "+
		"a one-time step that evals with a fuel budget need", w.cause, w.waited.Seconds(), what)
	if w.step != "" {
		msg += "; it goes on, and later evals use it. " + w.prep
	}
	return msg
}

func (w *altWait) Unwrap() error { return w.cause }

// result is the Result of an eval that stopped waiting: StatusCanceled,
// with the reason as its error.
func (w *altWait) result() *Result {
	return &Result{Status: StatusCanceled, Duration: w.waited,
		Error: &GuestError{Class: "Glovebox::Canceled", Message: w.Error(), Backtrace: []string{}}}
}

// prepareHint says what prepares the metered engine's steps ahead of
// time for a Runtime with mounts (engine mounts: guest paths matter).
func prepareHint(mounts []engine.Mount) string {
	cmd, rb := "glovebox setup", "Glovebox.setup"
	if len(mounts) > 0 {
		var flags, specs []string
		for _, m := range mounts {
			f, rw := m.Host+":"+m.Guest, ""
			if m.Write {
				f, rw = f+":rw", ", writable: true"
			}
			flags = append(flags, "--mount "+f)
			specs = append(specs, fmt.Sprintf("{ host: %q, guest: %q%s }", m.Host, m.Guest, rw))
		}
		cmd += " " + strings.Join(flags, " ")
		rb += "(mounts: [" + strings.Join(specs, ", ") + "])"
	}
	return "Run `" + cmd + "` (" + rb + " from Ruby) beforehand, as part of installing the app, so that no eval waits for it"
}

// target returns the engine and pool that r's evals run on: r's own, or,
// for a view with a fuel budget of an unmetered Runtime, the metered one,
// opening it on first use (its slow steps logged at Warn level). It waits
// for that until ctx ends (the eval's Timeout does not count it); then
// the error is an *altWait saying what it waited for. It fails with
// ErrClosed once r is closed.
func (r *Runtime) target(ctx context.Context) (*shared, error) {
	if r.closed() {
		return nil, ErrClosed
	}
	if r.limits.Fuel == 0 || r.shared.metered {
		return r.shared, nil
	}
	return r.shared.alt.get(ctx, r.log)
}

func (a *altEngine) get(ctx context.Context, log *slog.Logger) (*shared, error) {
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
	select {
	case <-b.done:
		return b.sh, b.err
	case <-ctx.Done():
		w := &altWait{waited: time.Since(start), cause: ctx.Err(), prep: prepareHint(a.mounts)}
		if p := b.step.Load(); p != nil {
			w.step = *p
		}
		return nil, w
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
		b.step.Store(&step)
		log.Warn("glovebox: an eval with a fuel budget waits for a one-time step: "+step+
			" (its timeout starts when the step is done). "+prepareHint(a.mounts), "step", step)
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
