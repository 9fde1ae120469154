package glovebox_test

import (
	"context"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

func TestSuspendSmoke(t *testing.T) {
	ctx := context.Background()
	keys, _ := glovebox.NewKeyring(glovebox.StateKey{ID: "k1", Secret: make([]byte, 32)})
	var ts glovebox.Toolset
	ts.Add("ask", func(ctx context.Context, a glovebox.Args) (any, error) { return nil, glovebox.SuspendCall("wait") })
	r, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, StateKeys: keys, PoolSize: -1, Limits: glovebox.Limits{Fuel: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res := eval(t, r, `puts "before"; x = ask(1, "two"); puts "after #{x}"; y = ask(x); [x, y, rand.class]`)
	t.Logf("%s %v %+v fuel=%d", res.Status, res.Pending, res.Error, res.FuelUsed)
	wantStatus(t, res, glovebox.StatusSuspended)
	t.Logf("state %d bytes, stdout %q", len(res.State), res.Stdout)
	res, err = r.Continue(ctx, res.State, glovebox.Answer{Value: 42})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v %+v stdout %q", res.Status, res.Pending, res.Error, res.Stdout)
	wantStatus(t, res, glovebox.StatusSuspended)
	res, err = r.Continue(ctx, res.State, glovebox.Answer{Value: "z"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v %+v stdout %q calls %+v fuel=%d", res.Status, res.Value, res.Error, res.Stdout, res.ToolCalls, res.FuelUsed)
	wantStatus(t, res, glovebox.StatusOK)

	s, _ := r.NewSession()
	eval1, _ := s.Eval(ctx, `x = 5; def g = 7; $big = "q" * 100`)
	wantStatus(t, eval1, glovebox.StatusOK)
	st, err := s.Suspend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle state %d bytes", len(st))
	s2, err := r.ResumeSession(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	res, _ = s2.Eval(ctx, `[x, g, $big.size, ask(x)]`)
	wantStatus(t, res, glovebox.StatusSuspended)
	res, err = s2.Continue(ctx, glovebox.Answer{Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v %+v", res.Status, res.Value, res.Error)
	wantStatus(t, res, glovebox.StatusOK)
	res, _ = s2.Eval(ctx, `x + 1`)
	t.Logf("%s %v %+v", res.Status, res.Value, res.Error)
}
