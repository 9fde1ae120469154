package executor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestPostgresDownUnavailable: while the executor's PostgreSQL is down,
// a new eval and a record's GET are refused 503 unavailable with
// Retry-After (not 500 internal); an eval that was running when it went
// down and ended while it was down completes once the database is back
// (its final record's write retried, not store_failed); new evals run
// again after.
func TestPostgresDownUnavailable(t *testing.T) {
	url, stop, start := executor.StartPostgresCtl(t)
	toks, tenants := mintTenants(t)
	p := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1})
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	if res, err := ev.EvalWith(ctx, "1 + 1", client.EvalOptions{Key: "e-before"}); err != nil || res.Value != int64(2) {
		t.Fatalf("before: %v %v", res, err)
	}

	type outcome struct {
		res *gb.Result
		err error
	}
	running := make(chan outcome, 1)
	go func() {
		res, err := ev.EvalWith(ctx, "sleep 2.5; 40 + 2", client.EvalOptions{Key: "e-across"})
		running <- outcome{res, err}
	}()
	waitFor(t, func() bool { st, _ := p.srv.Stored("a", "e-across"); return st == "running" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/evals", `{"idempotency_key":"e-down","code":"1"}`},
		{"GET", "/v1/evals/e-before", ""},
	} {
		r, _ := http.NewRequest(req.method, p.hs.URL+req.path, strings.NewReader(req.body))
		r.Header.Set("Authorization", "Bearer "+p.toks.a)
		resp, err := p.hs.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || body.Error.Code != "unavailable" {
			t.Errorf("%s %s with the database down: %d (Retry-After %q) %+v, want 503 unavailable with Retry-After",
				req.method, req.path, resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
		}
	}
	time.Sleep(3 * time.Second) // the running eval ends while the database is down
	if err := start(); err != nil {
		t.Fatal(err)
	}
	o := <-running
	if o.err != nil || o.res.Value != int64(42) {
		t.Fatalf("the eval that ended while the database was down: %v %v, want 42", o.res, o.err)
	}
	if st, _ := p.srv.Stored("a", "e-across"); st != "completed" {
		t.Errorf("its record: %q, want completed", st)
	}
	if res, err := ev.EvalWith(ctx, "1 + 2", client.EvalOptions{Key: "e-after"}); err != nil || res.Value != int64(3) {
		t.Errorf("after: %v %v", res, err)
	}
}
