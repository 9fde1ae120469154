package executor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestDrainCutsToLost: an eval still running when Drain's grace period
// ends is stopped and recorded lost, saying why; readiness is false from
// the start of the drain; a session idle at the drain keeps its state
// for the next executor on the store.
func TestDrainCutsToLost(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	keys := fleetKeys(t)
	start := func() *inproc {
		return pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1, StateKeys: keys})
	}
	p1 := start()
	var entered atomic.Int64
	release := make(chan struct{})
	var ts gb.Toolset
	ts.Add("hold", func(ctx context.Context, _ gb.Args) (any, error) {
		entered.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "held", nil
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	defer close(release)
	ev := p1.client(t, toks.a).Evaluator(rt)
	ctx := context.Background()
	s, err := ev.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, "$left = 'idle at the drain'"); err != nil || res.Status != gb.StatusOK {
		t.Fatal(res, err)
	}
	done := make(chan error, 1)
	go func() { _, err := ev.EvalWith(ctx, "hold", client.EvalOptions{Key: "e-cut-1"}); done <- err }()
	waitFor(t, func() bool { return entered.Load() == 1 })
	over, cancel := context.WithCancel(ctx)
	cancel() // no grace at all: what runs is cut
	p1.srv.Drain(over)
	if code, _ := rawDo(t, p1, toks.a, "GET", "/readyz", ""); code != 503 {
		t.Errorf("/readyz while drained: %d, want 503", code)
	}
	code, body := rawDo(t, p1, toks.a, "GET", "/v1/evals/e-cut-1", "")
	if code != 200 || !strings.Contains(body, `"state":"lost"`) || !strings.Contains(body, "grace period ended") {
		t.Errorf("the cut eval's record: %d %s", code, body)
	}
	<-done
	p2 := start()
	res, err := p2.client(t, toks.a).Evaluator(rt).Attach(s.ID()).Eval(ctx, "$left")
	if err != nil || res.Value != "idle at the drain" {
		t.Errorf("the session after the drain, on another executor: %v %v", res, err)
	}
}
