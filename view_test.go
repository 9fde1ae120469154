package glovebox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Closing a view (the README's `defer quick.Close()`) closes that view
// only: the Runtime it came from and its other views go on.
func TestClosingAViewLeavesTheRuntimeOpen(t *testing.T) {
	r := newRuntime(t, glovebox.Config{PoolSize: -1})
	quick, err := r.WithLimits(glovebox.Limits{Timeout: 5 * time.Second})
	must(t, err)
	other, err := r.WithLimits(glovebox.Limits{Stdout: 100})
	must(t, err)
	inner, err := quick.WithLimits(glovebox.Limits{Stderr: 100})
	must(t, err)
	wantStatus(t, eval(t, quick, `1`), glovebox.StatusOK)
	must(t, quick.Close())
	must(t, quick.Close()) // idempotent

	wantStatus(t, eval(t, r, `1 + 1`), glovebox.StatusOK)
	wantStatus(t, eval(t, other, `1 + 1`), glovebox.StatusOK)
	s, err := r.NewSession()
	must(t, err)
	defer s.Close()
	wantStatus(t, sessionEval(t, s, `1`), glovebox.StatusOK)

	// The closed view, and views derived from it, refuse.
	for name, v := range map[string]*glovebox.Runtime{"closed view": quick, "view of it": inner} {
		if _, err := v.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: Eval = %v, want ErrClosed", name, err)
		}
		if _, err := v.NewSession(); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: NewSession = %v, want ErrClosed", name, err)
		}
		if _, err := v.WithLimits(glovebox.Limits{}); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: WithLimits = %v, want ErrClosed", name, err)
		}
	}

	// Closing the Runtime closes its views.
	must(t, r.Close())
	if _, err := other.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
		t.Errorf("view of a closed Runtime: Eval = %v, want ErrClosed", err)
	}
}
