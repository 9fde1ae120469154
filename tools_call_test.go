package glovebox_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// TestFlatArgumentsMatchJSON checks that scalar arguments, which the
// prelude sends in the flat form, reach a tool exactly as they do in the
// JSON form (forced here by a keyword argument): integers at and past
// the int64 edges, floats, strings in every encoding, symbols, nil and
// booleans.
func TestFlatArgumentsMatchJSON(t *testing.T) {
	var mu sync.Mutex
	var seen [][]any
	var ts glovebox.Toolset
	ts.Add("echo", func(_ context.Context, a glovebox.Args) (any, error) {
		mu.Lock()
		seen = append(seen, a.Positional)
		mu.Unlock()
		return a.Positional, nil
	})
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	values := []string{
		`0`, `-1`, `2**63 - 1`, `-2**63`, `2**63`, `-2**63 - 1`, `2**80`,
		`1.5`, `1e20`, `-0.0`, `1e-7`, `Float::INFINITY`, `-Float::INFINITY`,
		`nil`, `true`, `false`,
		`"héllo"`, `"a\0b;s3:"`, `""`, `"abc".b`, `"\xff\xfeA".b`, `"\xffA".force_encoding("UTF-8")`,
		`"ok".encode("US-ASCII")`, `"é".encode("ISO-8859-1")`, `:sym`, `:"é"`,
	}
	for _, v := range values {
		mu.Lock()
		seen = nil
		mu.Unlock()
		res := eval(t, r, "x = ["+v+"]\n[echo(*x), echo(*x, z: 1), Glovebox.call(:echo, *x)]")
		wantStatus(t, res, glovebox.StatusOK)
		mu.Lock()
		got := seen
		mu.Unlock()
		if len(got) != 3 || !sameArgs(got[0], got[1]) || !sameArgs(got[2], got[1]) {
			t.Errorf("%s: the tool saw %#v (flat) and %#v (JSON)", v, got[0], got[1])
			continue
		}
		out := res.Value.([]any)
		if !sameArgs(out[0].([]any), out[1].([]any)) {
			t.Errorf("%s: the guest got back %#v and %#v", v, out[0], out[1])
		}
	}
	// The edges: int64 stays int64, one past it is a *big.Int, exactly.
	res := eval(t, r, "echo(2**63 - 1, -2**63, 2**63, -2**63 - 1)")
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{int64(math.MaxInt64), int64(math.MinInt64), new(big.Int).Lsh(big.NewInt(1), 63), new(big.Int).Neg(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 63), big.NewInt(1)))}
	if !sameArgs(res.ToolCalls[0].Args.Positional, want) {
		t.Fatalf("transcript has %#v", res.ToolCalls[0].Args.Positional)
	}
}

func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch x := a[i].(type) {
		case *big.Int:
			y, ok := b[i].(*big.Int)
			if !ok || x.Cmp(y) != 0 {
				return false
			}
		case float64:
			y, ok := b[i].(float64)
			if !ok || !(x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y)) {
				return false
			}
		default:
			if !reflect.DeepEqual(a[i], b[i]) {
				return false
			}
		}
	}
	return true
}

// TestToolContextLifetime checks the context a tool runs with, which
// starts no timer until asked: it carries the deadline, ends when the
// call returns (as a context.WithDeadline's cancel would end it), ends at
// the deadline for a tool that only polls Err, and contexts derived from
// it end with it.
func TestToolContextLifetime(t *testing.T) {
	var ts glovebox.Toolset
	type seen struct {
		deadline time.Time
		ok       bool
		errAtEnd error
	}
	kept := make(chan context.Context, 1)
	derived := make(chan context.Context, 1)
	polled := make(chan error, 1)
	var got seen
	ts.Func("keep", func(ctx context.Context) int {
		got.deadline, got.ok = ctx.Deadline()
		got.errAtEnd = ctx.Err()
		d, cancel := context.WithCancel(ctx)
		_ = cancel // ends with ctx; the test checks that
		kept <- ctx
		derived <- d
		return 1
	})
	ts.Func("poll", func(ctx context.Context) int {
		for ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		polled <- ctx.Err()
		return 0
	})
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 2 * time.Second, ToolTime: 200 * time.Millisecond}})
	start := time.Now()
	res := eval(t, r, "keep")
	wantStatus(t, res, glovebox.StatusOK)
	if !got.ok || got.deadline.Before(start) || got.deadline.After(start.Add(time.Second)) || got.errAtEnd != nil {
		t.Fatalf("inside the call: deadline %v (%v), err %v", got.deadline, got.ok, got.errAtEnd)
	}
	ctx, d := <-kept, <-derived
	for name, c := range map[string]context.Context{"the tool's context": ctx, "a context derived from it": d} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not end when the call returned", name)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("%s ended with %v", name, c.Err())
		}
	}
	res = eval(t, r, "poll")
	wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
	if err := <-polled; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a polling tool saw %v", err)
	}
}
