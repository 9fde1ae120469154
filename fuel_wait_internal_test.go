package glovebox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// slowAlt stands in for a slow one-time step of the metered engine (a
// compile, a snapshot's boot) that lasts until release is closed: it
// reports step as the engine does, then opens the real metered engine
// (from the warm cache). fail makes its first opening fail instead.
type slowAlt struct {
	calls   atomic.Int32
	started chan struct{}
	release chan struct{}
	fail    bool
	step    string // "" : the compile's
}

func stubAlt(t *testing.T, s *slowAlt) {
	s.started, s.release = make(chan struct{}), make(chan struct{})
	if s.step == "" {
		s.step = "compiling the fuel-metered Ruby image (first run only)"
	}
	prev := openAlt
	openAlt = func(ctx context.Context, cfg engine.Config) (*shared, error) {
		n := s.calls.Add(1)
		done := cfg.Progress(s.step)
		if n == 1 {
			close(s.started)
			<-s.release
		}
		done()
		if s.fail && n == 1 {
			return nil, errors.New("compile failed")
		}
		return acquire(ctx, cfg)
	}
	t.Cleanup(func() { openAlt = prev })
}

// An eval with a fuel budget on an unmetered Runtime, while the metered
// image compiles: the compile is logged at Warn with the way to avoid it;
// an eval whose context ends while it waits gets a result naming the step
// and `glovebox setup`; an eval with a Timeout shorter than the wait
// waits it out and runs with its whole Timeout (one-time preparation does
// not count against it); the engine is opened once for all of them.
func TestFuelEvalWaitingForCompile(t *testing.T) {
	s := &slowAlt{}
	stubAlt(t, s)
	// Read only after the opening has ended (the logging happens on its
	// goroutine, before the evals waiting on it return).
	var logs bytes.Buffer
	rt, err := New(context.Background(), Config{PoolSize: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	view, err := rt.WithLimits(Limits{Fuel: 1_000_000_000, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.started; cancel() }()
	res, err := view.Eval(ctx, "1+1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusCanceled || res.Error == nil || res.Error.Class != "Glovebox::Canceled" {
		t.Fatalf("status %s, error %+v; want canceled", res.Status, res.Error)
	}
	for _, w := range []string{"did not run", "compiling the fuel-metered Ruby image", "`glovebox setup`", "Glovebox.setup"} {
		if !strings.Contains(res.Error.Message, w) {
			t.Errorf("message lacks %q: %s", w, res.Error.Message)
		}
	}

	// Released well after the 300 ms Timeout: the eval still runs.
	go func() { time.Sleep(900 * time.Millisecond); close(s.release) }()
	start := time.Now()
	res, err = view.Eval(context.Background(), "1+1")
	if err != nil || res.Status != StatusOK || res.FuelUsed == 0 {
		t.Fatalf("an eval waiting past its Timeout for the compile: %+v, %v", res, err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("the eval returned after %v, before the compile ended", waited)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "waits for a one-time step: compiling the fuel-metered Ruby image") ||
		!strings.Contains(l, "glovebox setup") {
		t.Errorf("the compile was not logged at Warn naming it and the way to avoid it:\n%s", l)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("the metered engine was opened %d times, want once for the two evals", n)
	}
}

// An eval with a fuel budget on an unmetered Runtime with mounts, while
// the metered image boots a snapshot for the mount layout: the error of
// an eval whose context ends names that step (not a load from the cache)
// and the setup command that prepares this layout.
func TestFuelEvalWaitingForLayoutSnapshot(t *testing.T) {
	s := &slowAlt{step: "booting the fuel-metered Ruby image to build a snapshot for the mount layout /data (once per layout)"}
	stubAlt(t, s)
	defer close(s.release)
	dir := t.TempDir()
	rt, err := New(context.Background(), Config{PoolSize: -1, Mounts: []Mount{{HostPath: dir, GuestPath: "/data", Writable: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	view, _ := rt.WithLimits(Limits{Fuel: 1_000_000_000})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.started; cancel() }()
	res, err := view.Eval(ctx, "1+1")
	if err != nil || res.Error == nil {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, w := range []string{"snapshot for the mount layout /data", "`glovebox setup --mount " + dir + ":/data:rw`",
		`Glovebox.setup(mounts: [{ host: "` + dir + `", guest: "/data", writable: true }])`} {
		if !strings.Contains(res.Error.Message, w) {
			t.Errorf("message lacks %q: %s", w, res.Error.Message)
		}
	}
	if strings.Contains(res.Error.Message, "from the cache") {
		t.Errorf("message names a load from the cache: %s", res.Error.Message)
	}
}

// A failed opening of the metered engine is the eval's host error, and
// the next eval tries again.
func TestFuelEvalCompileFailureRetried(t *testing.T) {
	s := &slowAlt{fail: true}
	stubAlt(t, s)
	close(s.release)
	rt, err := New(context.Background(), Config{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	view, _ := rt.WithLimits(Limits{Fuel: 1_000_000_000})
	if _, err := view.Eval(context.Background(), "1+1"); err == nil || !strings.Contains(err.Error(), "compile failed") {
		t.Fatalf("err %v, want the opening's error", err)
	}
	res, err := view.Eval(context.Background(), "1+1")
	if err != nil || res.Status != StatusOK {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Errorf("opened %d times, want 2", n)
	}
}
