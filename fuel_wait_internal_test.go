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

// slowAlt stands in for a compile of the metered image that lasts until
// release is closed: it reports the compile step as the engine does, then
// opens the real metered engine (from the warm cache). fail makes its
// first opening fail instead.
type slowAlt struct {
	calls   atomic.Int32
	started chan struct{}
	release chan struct{}
	fail    bool
}

func stubAlt(t *testing.T, s *slowAlt) {
	s.started, s.release = make(chan struct{}), make(chan struct{})
	prev := openAlt
	openAlt = func(ctx context.Context, cfg engine.Config) (*shared, error) {
		n := s.calls.Add(1)
		done := cfg.Progress("compiling the fuel-metered Ruby image (first run only)")
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
// image compiles: the compile is logged with the way to avoid it; an eval
// whose context ends, or whose Timeout passes, while it waits gets a
// result saying the image was being compiled and to run `glovebox setup`;
// the compile goes on, and the next eval runs on it, metered.
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
	wantWait := func(res *Result, st Status, class string) {
		t.Helper()
		if res.Status != st || res.Error == nil || res.Error.Class != class {
			t.Fatalf("status %s, error %+v; want %s, %s", res.Status, res.Error, st, class)
		}
		for _, w := range []string{"did not run", "compiling the fuel-metered Ruby image", "glovebox setup"} {
			if !strings.Contains(res.Error.Message, w) {
				t.Errorf("message lacks %q: %s", w, res.Error.Message)
			}
		}
	}
	wantWait(res, StatusCanceled, "Glovebox::Canceled")

	res, err = view.Eval(context.Background(), "1+1")
	if err != nil {
		t.Fatal(err)
	}
	wantWait(res, StatusTimeout, "Glovebox::Timeout")
	if !strings.Contains(res.Error.Message, "300ms wall-clock limit") || res.Duration < 300*time.Millisecond {
		t.Errorf("timeout result %v, %q", res.Duration, res.Error.Message)
	}

	close(s.release)
	view, _ = rt.WithLimits(Limits{Fuel: 1_000_000_000, Timeout: 10 * time.Second})
	res, err = view.Eval(context.Background(), "1+1")
	if err != nil || res.Status != StatusOK || res.FuelUsed == 0 {
		t.Fatalf("after the compile: %+v, %v", res, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "fuel-metered Ruby image compiles") ||
		!strings.Contains(l, "glovebox setup") {
		t.Errorf("the compile was not logged at Warn with the way to avoid it:\n%s", l)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("the metered engine was opened %d times, want once for the three evals", n)
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
