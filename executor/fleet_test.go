package executor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestFleetRoutesByKey: two executors, each with its own store; a key
// always reaches the same one (whatever the members' order), both get a
// share, and a repeat of a key is answered from that executor's record
// without running its tool again.
func TestFleetRoutesByKey(t *testing.T) {
	p1, p2 := startEvals(t), startEvals(t)
	c1, c2 := p1.client(t, p1.toks.a), p2.client(t, p2.toks.a)
	f, err := client.NewFleet(c1, c2)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := client.NewFleet(c2, c1)
	if _, err := client.NewFleet(c1, c1); err == nil {
		t.Error("a member twice was accepted")
	}
	a := newApp(t, gb.Limits{})
	fe := f.Evaluator(a.rt)
	served := map[*client.Client]int{}
	for i := range 32 { // all on one side by chance: 2^-31
		key := fmt.Sprintf("e-fleet-%d", i)
		m := f.Pick(key)
		if rev.Pick(key) != m {
			t.Fatalf("key %s: the pick depends on the members' order", key)
		}
		res, err := fe.EvalWith(context.Background(), fmt.Sprintf("add(%d, 1)", i+100), client.EvalOptions{Key: key})
		if err != nil || res.Value != int64(i+101) {
			t.Fatalf("eval %d: %v %v", i, res, err)
		}
		served[m]++
		mine, other := p1, p2
		if m == c2 {
			mine, other = p2, p1
		}
		if code, _ := rawDo(t, mine, mine.toks.a, "GET", "/v1/evals/"+key, ""); code != 200 {
			t.Errorf("key %s: not on the executor it was routed to (%d)", key, code)
		}
		if code, _ := rawDo(t, other, other.toks.a, "GET", "/v1/evals/"+key, ""); code != 404 {
			t.Errorf("key %s: also on the other executor (%d)", key, code)
		}
	}
	if served[c1] == 0 || served[c2] == 0 {
		t.Errorf("one executor got every key: %v", served)
	}
	hits := a.hits.Load()
	res, err := fe.EvalWith(context.Background(), "add(103, 1)", client.EvalOptions{Key: "e-fleet-3"})
	if err != nil || res.Value != int64(104) || a.hits.Load() != hits {
		t.Errorf("repeat of a key: %v %v, tool ran %d more times", res, err, a.hits.Load()-hits)
	}
}

// startPgPair starts two executors with evals sharing one real
// PostgreSQL store and the same tenants (so one token works on both).
func startPgPair(t *testing.T) (p1, p2 *inproc) {
	return startPgPairWith(t, executor.EvalConfig{PoolSize: -1})
}

// startPgPairWith is startPgPair with evals configured by cfg.
func startPgPairWith(t *testing.T, cfg executor.EvalConfig) (p1, p2 *inproc) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	return pgExecutor(t, url, toks, tenants, cfg), pgExecutor(t, url, toks, tenants, cfg)
}

// pgExecutor starts an executor with evals (cfg) on the PostgreSQL
// store at url, with tenants (whose tokens are toks).
func pgExecutor(t *testing.T, url string, toks tenantTok, tenants []executor.Tenant, cfg executor.EvalConfig) *inproc {
	p := startInproc(t, 1, func(c *executor.Config) { c.StorePath, c.StoreURL, c.Tenants = "", url, tenants })
	p.toks = toks
	if err := p.srv.EnableEvals(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPostgresFleetAnyExecutor: two executors on one PostgreSQL store
// share the keys: an eval through one is answered from its record
// through the other (its tool not run again), a different request under
// the key is key_conflict on either, and either one's GET reads it.
func TestPostgresFleetAnyExecutor(t *testing.T) {
	p1, p2 := startPgPair(t)
	a := newApp(t, gb.Limits{})
	e1, e2 := p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	for i := range 8 {
		key := fmt.Sprintf("e-pg-%d", i)
		first, second := e1, e2
		if i%2 == 1 {
			first, second = e2, e1
		}
		res, err := first.EvalWith(ctx, fmt.Sprintf("add(%d, 1)", i), client.EvalOptions{Key: key})
		if err != nil || res.Value != int64(i+1) {
			t.Fatalf("eval %d: %v %v", i, res, err)
		}
		hits := a.hits.Load()
		res, err = second.EvalWith(ctx, fmt.Sprintf("add(%d, 1)", i), client.EvalOptions{Key: key})
		if err != nil || res.Value != int64(i+1) || a.hits.Load() != hits {
			t.Errorf("key %s through the other executor: %v %v, tool ran %d more times", key, res, err, a.hits.Load()-hits)
		}
		if _, err := second.EvalWith(ctx, "add(0, 0)", client.EvalOptions{Key: key}); err == nil || !strings.Contains(err.Error(), "key_conflict") {
			t.Errorf("key %s with another request: %v, want key_conflict", key, err)
		}
		for _, p := range []*inproc{p1, p2} {
			if code, _ := rawDo(t, p, p.toks.a, "GET", "/v1/evals/"+key, ""); code != 200 {
				t.Errorf("key %s: GET answered %d", key, code)
			}
		}
	}
}
