package glovebox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

func newSession(t *testing.T, r *glovebox.Runtime) *glovebox.Session {
	t.Helper()
	s, err := r.NewSession()
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func sessionEval(t *testing.T, s *glovebox.Session, code string) *glovebox.Result {
	t.Helper()
	res, err := s.Eval(context.Background(), code)
	must(t, err)
	return res
}

// A session keeps state across 100 evals, loses it to a timeout (and says
// so), then works again from a fresh VM.
func TestSessionStateResetAndRecovery(t *testing.T) {
	s := newSession(t, withLimits(t, glovebox.Limits{Timeout: 2 * time.Second}))
	for i := range 100 {
		code := fmt.Sprintf(`
			acc ||= []
			acc << %d
			def m%d = %d
			require "set" if %d == 0
			$total = (defined?($total) && $total ? $total : 0) + %d
			[acc.size, m%d, defined?(Set) ? 1 : 0]`, i, i, i, i, i, i)
		res := sessionEval(t, s, code)
		wantStatus(t, res, glovebox.StatusOK)
		if !equalValue(res.Value, []any{int64(i + 1), int64(i), int64(1)}) || res.SessionReset {
			t.Fatalf("eval %d: %v (reset %v)", i, res.Value, res.SessionReset)
		}
	}
	res := sessionEval(t, s, `[acc.sum, $total, m0 + m99]`)
	if !equalValue(res.Value, []any{int64(4950), int64(4950), int64(99)}) {
		t.Fatalf("state after 100 evals: %v", res.Value)
	}
	// An exception keeps the state.
	res = sessionEval(t, s, `raise "boom"`)
	wantStatus(t, res, glovebox.StatusError)
	if res.SessionReset {
		t.Fatal("an exception reset the session")
	}
	res = sessionEval(t, s, `loop {}`)
	wantStatus(t, res, glovebox.StatusTimeout)
	if !res.SessionReset {
		t.Fatal("a timeout did not report the reset")
	}
	res = sessionEval(t, s, `[defined?(acc).inspect, defined?(m0).inspect, 6 * 7]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{"nil", "nil", int64(42)}) || res.SessionReset {
		t.Fatalf("after the reset: %v (reset %v)", res.Value, res.SessionReset)
	}
	// The fresh VM keeps state again.
	sessionEval(t, s, `x = 5`)
	if res := sessionEval(t, s, `x`); res.Value != int64(5) {
		t.Fatalf("state after the reset: %v", res.Value)
	}
}

func TestSessionTrapsReset(t *testing.T) {
	for name, c := range map[string]struct {
		limits glovebox.Limits
		code   string
		status glovebox.Status
	}{
		"fuel":   {glovebox.Limits{Fuel: 50_000_000}, `loop {}`, glovebox.StatusFuelExhausted},
		"memory": {glovebox.Limits{Memory: 400 << 20}, `"x" * (200 << 20)`, glovebox.StatusMemoryLimit},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSession(t, withLimits(t, c.limits))
			sessionEval(t, s, `y = 1`)
			res := sessionEval(t, s, c.code)
			wantStatus(t, res, c.status)
			if !res.SessionReset {
				t.Fatal("no reset reported")
			}
			if res := sessionEval(t, s, `defined?(y).inspect`); res.Value != "nil" {
				t.Fatalf("state survived the trap: %v", res.Value)
			}
		})
	}
}

func TestSessionConcurrentEvalsSerialize(t *testing.T) {
	s := newSession(t, rt)
	sessionEval(t, s, `$n = 0`)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := s.Eval(context.Background(), `v = $n; Thread.pass; $n = v + 1`); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if res := sessionEval(t, s, `$n`); res.Value != int64(40) {
		t.Fatalf("$n = %v, want 40", res.Value)
	}
}

func TestSessionCloseAndScratch(t *testing.T) {
	s := newSession(t, rt)
	res := sessionEval(t, s, `File.write("/tmp/a", "1"); keep = 1; Dir.children("/tmp").size`)
	if res.Value != int64(1) {
		t.Fatalf("got %v", res.Value)
	}
	res = sessionEval(t, s, `[keep, Dir.children("/tmp").size]`)
	if !equalValue(res.Value, []any{int64(1), int64(0)}) {
		t.Fatalf("scratch not wiped between a session's evals: %v", res.Value)
	}
	must(t, s.Close())
	must(t, s.Close()) // idempotent
	if _, err := s.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrSessionClosed) || errors.Is(err, glovebox.ErrClosed) {
		t.Fatalf("eval after Close: %v, want ErrSessionClosed (the Runtime is open)", err)
	}

	r := newRuntime(t, glovebox.Config{PoolSize: -1})
	s2, err := r.NewSession()
	must(t, err)
	sessionEval(t, s2, `1`)
	r.Close()
	if _, err := s2.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
		t.Fatalf("eval after the Runtime closed: %v", err)
	}
	if _, err := r.NewSession(); !errors.Is(err, glovebox.ErrClosed) {
		t.Fatalf("NewSession on a closed Runtime: %v", err)
	}
	s2.Close()
}
