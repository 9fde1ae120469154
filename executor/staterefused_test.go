package executor_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestRefusedStateStaysContinuable: two executors on one store, the
// second configured with other limits (a rolling upgrade's mix): a
// continue through the second refuses the paused state (state_refused,
// naming the limits) without using it up, so the continue through the
// first, configured as the one that paused, still runs it; the same for
// a session's pause.
func TestRefusedStateStaysContinuable(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	keys := fleetKeys(t)
	p1 := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1, StateKeys: keys})
	p2 := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1, StateKeys: keys, Limits: gb.Limits{Stdout: 4 << 10}})
	a := newApp(t, gb.Limits{})
	e1, e2 := p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "state_refused" || !strings.Contains(ce.Message, "limits") {
			t.Fatalf("%s through the other executor: %v, want state_refused naming the limits", what, err)
		}
	}

	res, err := e1.EvalWith(ctx, `add(1, 2) + 1`, client.EvalOptions{Key: "e-refused-1", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("first eval: %+v %v", res, err)
	}
	_, err = e2.Continue(ctx, "e-refused-1", client.Answer{Approve: true}, client.EvalOptions{Key: "e-refused-2"})
	refused("the continue", err)
	res, err = e1.Continue(ctx, "e-refused-1", client.Answer{Approve: true}, client.EvalOptions{Key: "e-refused-3"})
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(4) {
		t.Fatalf("the continue through the executor that paused it: %+v %v", res, err)
	}

	s1, err := e1.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = s1.EvalWith(ctx, `$x = add(20, 1) * 2`, client.EvalOptions{Key: "e-refused-s", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("the session's eval: %+v %v", res, err)
	}
	_, err = e2.Continue(ctx, "e-refused-s", client.Answer{Approve: true}, client.EvalOptions{Key: "e-refused-s2"})
	refused("the session's continue", err)
	res, err = e1.Continue(ctx, "e-refused-s", client.Answer{Approve: true}, client.EvalOptions{Key: "e-refused-s3"})
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(42) {
		t.Fatalf("the session's continue through the executor that paused it: %+v %v", res, err)
	}
}
