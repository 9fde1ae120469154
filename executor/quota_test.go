package executor_test

import (
	"context"
	"errors"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestQuotaHoldsAcrossTheFleet: a tenant's max_stored_bytes filled
// through one executor is refused through the other once it has counted
// the store (every second; here at once), not only through the first.
func TestQuotaHoldsAcrossTheFleet(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	tenants[0].MaxStoredBytes = 256 << 10
	start := func() *inproc { return pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1}) }
	p1, p2 := start(), start()
	rt, err := gb.New(context.Background(), gb.Config{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	e1, e2 := p1.client(t, toks.a).Evaluator(rt), p2.client(t, toks.a).Evaluator(rt)
	ctx := context.Background()
	quota := func(err error) bool {
		var ce *client.Error
		return errors.As(err, &ce) && ce.Code == "quota_exceeded"
	}
	for i := 0; ; i++ {
		_, err := e1.Eval(ctx, `puts "x" * 150_000`)
		if quota(err) {
			break
		}
		if err != nil || i == 4 {
			t.Fatalf("filling through the first executor, eval %d: %v", i, err)
		}
	}
	if err := p2.srv.Recount(); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Eval(ctx, `1`); !quota(err) {
		t.Errorf("through the second executor: %v, want quota_exceeded", err)
	}
	if _, err := p2.client(t, toks.b).Evaluator(rt).Eval(ctx, `1`); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}
