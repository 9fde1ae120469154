package executor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// Attacks on the fleet's shared state: two executors on one real
// PostgreSQL, two tenants, the real client.

// gateTools is a Runtime whose tool "gate" waits until release is
// closed (or a minute) and returns its argument.
func gateTools(t *testing.T) (*gb.Runtime, chan struct{}, chan struct{}) {
	release, called := make(chan struct{}), make(chan struct{}, 64)
	var ts gb.Toolset
	ts.Add("gate", func(ctx context.Context, a gb.Args) (any, error) {
		called <- struct{}{}
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		return fmt.Sprint(a.Positional...), nil
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, release, called
}

// TestFleetOtherTenantCannotTouch: while tenant a's eval waits in a
// tool call on one executor, tenant b, through either executor and
// knowing the key, can neither answer its call, read, cancel, nor join
// it (the same key string is b's own eval), nor use a's session or
// continue a's paused eval.
func TestFleetOtherTenantCannotTouch(t *testing.T) {
	p1, p2 := startStatePair(t)
	rt, release, called := gateTools(t)
	ctx := context.Background()
	const key = "e-tenant-a-secret"
	done := make(chan error, 1)
	go func() {
		res, err := p1.client(t, p1.toks.a).Evaluator(rt).EvalWith(ctx, `gate("from-a")`, client.EvalOptions{Key: key})
		if err == nil && res.Value != "from-a" {
			err = fmt.Errorf("value %v", res.Value)
		}
		done <- err
	}()
	<-called
	for _, p := range []*inproc{p1, p2} {
		if code, body := rawDo(t, p, p.toks.b, "POST", "/v1/evals/"+key+"/tool-results", `{"id": 1, "reply": "s\nfrom-b"}`); code != 404 {
			t.Errorf("tenant b answering a's call: %d %s", code, body)
		}
		if code, body := rawDo(t, p, p.toks.b, "GET", "/v1/evals/"+key, ""); code != 404 {
			t.Errorf("tenant b reading a's eval: %d %s", code, body)
		}
		if code, body := rawDo(t, p, p.toks.b, "DELETE", "/v1/evals/"+key, ""); code != 404 {
			t.Errorf("tenant b canceling a's eval: %d %s", code, body)
		}
	}
	// b's eval under the same key string is b's own: it runs (its own
	// gate call), never sees a's.
	bres, err := p2.client(t, p2.toks.b).Evaluator(newApp(t, gb.Limits{}).rt).EvalWith(ctx, `add(2, 3)`, client.EvalOptions{Key: key})
	if err != nil || bres.Value != int64(5) {
		t.Errorf("tenant b's eval under a's key string: %v %v", bres, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("tenant a's eval: %v", err)
	}

	a := newApp(t, gb.Limits{})
	ea := p1.client(t, p1.toks.a).Evaluator(a.rt)
	sa, err := ea.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Eval(ctx, `$secret = "a's"`); err != nil {
		t.Fatal(err)
	}
	res, err := ea.EvalWith(ctx, `add(1, 2)`, client.EvalOptions{Key: "e-a-paused", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("a's paused eval: %+v %v", res, err)
	}
	for _, p := range []*inproc{p1, p2} {
		eb := p.client(t, p.toks.b).Evaluator(a.rt)
		var ce *client.Error
		if res, err := eb.Attach(sa.ID()).Eval(ctx, `$secret`); !errors.As(err, &ce) || ce.Code != "not_found" {
			t.Errorf("tenant b's eval in a's session: %v %v, want not_found", res, err)
		}
		if code, body := rawDo(t, p, p.toks.b, "DELETE", "/v1/sessions/"+sa.ID(), ""); code != 404 {
			t.Errorf("tenant b closing a's session: %d %s", code, body)
		}
		if res, err := eb.Continue(ctx, "e-a-paused", client.Answer{Approve: true}, client.EvalOptions{}); !errors.As(err, &ce) || ce.Code != "not_found" {
			t.Errorf("tenant b continuing a's paused eval: %v %v, want not_found", res, err)
		}
	}
	if res, err := sa.Eval(ctx, `$secret`); err != nil || res.Value != "a's" {
		t.Errorf("a's session after b's attempts: %v %v", res, err)
	}
	if res, err := ea.Continue(ctx, "e-a-paused", client.Answer{Approve: true}, client.EvalOptions{}); err != nil || res.Value != int64(3) {
		t.Errorf("a's continue after b's attempts: %v %v", res, err)
	}
	if a.hits.Load() != 1 {
		t.Errorf("a's tool ran %d times, want 1", a.hits.Load())
	}
}

// pgConn opens the fleet's PostgreSQL for a test's own queries.
func pgConn(t *testing.T, url string) *pgx.Conn {
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestRelayedAnswersDoNotOutliveEval: answers posted through the other
// executor for calls an eval never makes are bounded per eval while it
// runs and dropped once it ended: else a tenant running short evals one
// after another, each with 16 answers of a request's size, grows the
// shared store without bound until the retention, outside its byte
// quota.
func TestRelayedAnswersDoNotOutliveEval(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	cfg := executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)}
	p1, p2 := pgExecutor(t, url, toks, tenants, cfg), pgExecutor(t, url, toks, tenants, cfg)
	db := pgConn(t, url)
	ctx := context.Background()
	big := strings.Repeat("x", 64<<10)
	for round := range 3 {
		rt, release, called := gateTools(t)
		key := fmt.Sprintf("e-relay-flood-%d", round)
		done := make(chan error, 1)
		go func() {
			_, err := p1.client(t, p1.toks.a).Evaluator(rt).EvalWith(ctx, `gate("x")`, client.EvalOptions{Key: key})
			done <- err
		}()
		<-called
		accepted, full := 0, 0
		for id := 100; id < 120; id++ {
			switch code, body := rawDo(t, p2, p2.toks.a, "POST", "/v1/evals/"+key+"/tool-results", fmt.Sprintf(`{"id": %d, "reply": "s\n%s"}`, id, big)); code {
			case 202:
				accepted++
			case 429:
				full++
			default:
				t.Fatalf("answer %d: %d %s", id, code, body)
			}
		}
		if accepted != 16 || full != 4 {
			t.Errorf("round %d: %d answers accepted, %d queue_full; want 16 and 4", round, accepted, full)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM glovebox_tool_replies WHERE key <> 'e-relay-flood-2'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d relayed answers of evals that ended are still stored", n)
	}
	// The last eval's answers wait for no next answer: the janitor's
	// sweep (ExpireRelayed runs it now) deletes them too.
	p2.srv.ExpireRelayed()
	if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM glovebox_tool_replies`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d relayed answers of the last eval are stored after the janitor's sweep", n)
	}
}

// TestRelayedAnswerWithNUL: a string answer holding a NUL byte, through
// the other executor, reaches the guest as it would over the eval's own
// connection (PostgreSQL's text type refuses NUL).
func TestRelayedAnswerWithNUL(t *testing.T) {
	p1, p2 := startStatePair(t)
	c, st := splitClient(t, p1, p2)
	var ts gb.Toolset
	ts.Add("nul", func(context.Context, gb.Args) (any, error) { return "a\x00b", nil })
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Evaluator(rt).Eval(ctx, `nul.bytes`)
	if err != nil || fmt.Sprint(res.Value) != "[97 0 98]" {
		t.Errorf("an answer with a NUL through the other executor: %v %v", res, err)
	}
	if st.relayed.Load() == 0 {
		t.Error("the answer did not go through the other executor")
	}
}

// TestTamperedSessionStateRefused: a session's sealed state altered in
// PostgreSQL, or another session's (of another tenant, or of the same
// tenant) put in its row, is refused state_refused before any guest code
// runs: it never becomes another tenant's or another session's heap.
func TestTamperedSessionStateRefused(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	cfg := executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)}
	p1 := pgExecutor(t, url, toks, tenants, cfg)
	db := pgConn(t, url)
	ctx := context.Background()
	a := newApp(t, gb.Limits{})
	mk := func(tok, code string) *client.Session {
		s, err := p1.client(t, tok).Evaluator(a.rt).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Eval(ctx, code); err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa := mk(toks.a, `$secret = "a's secret"`)
	sa2 := mk(toks.a, `$n = 2`)
	sb := mk(toks.b, `$n = 1`)
	copyState := func(fromTenant, from, toTenant, to string) {
		if _, err := db.Exec(ctx, `UPDATE glovebox_sessions d SET state = s.state, version = s.version
			FROM glovebox_sessions s WHERE s.tenant = $1 AND s.id = $2 AND d.tenant = $3 AND d.id = $4`, fromTenant, from, toTenant, to); err != nil {
			t.Fatal(err)
		}
	}
	probe := `defined?($secret) ? $secret : "none"`
	check := func(what, tok, sid string) {
		t.Helper()
		// A fresh executor: no live session cached, the stored state is loaded.
		p := pgExecutor(t, url, toks, tenants, cfg)
		res, err := p.client(t, tok).Evaluator(a.rt).Attach(sid).Eval(ctx, probe)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "state_refused" {
			t.Errorf("%s: %v %v, want state_refused", what, res, err)
		}
	}
	copyState("a", sa.ID(), "b", sb.ID())
	check("tenant a's session state in tenant b's row", toks.b, sb.ID())
	copyState("a", sa.ID(), "a", sa2.ID())
	check("one session's state in another's row of the same tenant", toks.a, sa2.ID())
	if _, err := db.Exec(ctx, `UPDATE glovebox_sessions SET state = set_byte(state, length(state) / 2, get_byte(state, length(state) / 2) # 1)
		WHERE tenant = 'a' AND id = $1`, sa.ID()); err != nil {
		t.Fatal(err)
	}
	check("a flipped byte", toks.a, sa.ID())

	// A paused eval's state (and its meta) copied into another tenant's
	// paused row.
	for _, tok := range []string{toks.a, toks.b} {
		res, err := p1.client(t, tok).Evaluator(a.rt).EvalWith(ctx, `add(1, 2)`, client.EvalOptions{Key: "e-pause-tamper", Suspend: []string{"add"}})
		if err != nil || res.Status != gb.StatusSuspended {
			t.Fatalf("paused eval: %+v %v", res, err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE glovebox_paused d SET state = s.state, limits = s.limits
		FROM glovebox_paused s WHERE s.tenant = 'a' AND d.tenant = 'b' AND s.key = d.key`); err != nil {
		t.Fatal(err)
	}
	hits := a.hits.Load()
	var ce *client.Error
	if res, err := p1.client(t, toks.b).Evaluator(a.rt).Continue(ctx, "e-pause-tamper", client.Answer{Approve: true}, client.EvalOptions{}); !errors.As(err, &ce) || ce.Code != "state_refused" {
		t.Errorf("tenant a's paused state in tenant b's row: %v %v, want state_refused", res, err)
	}
	if a.hits.Load() != hits {
		t.Error("a tool of the moved paused state ran")
	}
}

// TestContinueRaceThroughTwoExecutors: continues of one paused session
// eval racing through both executors (each its own continuing key): one
// runs the approved call, once; the others are already_continued, and
// the session goes on from the one that ran.
func TestContinueRaceThroughTwoExecutors(t *testing.T) {
	p1, p2 := startStatePair(t)
	a := newApp(t, gb.Limits{})
	evs := []*client.Evaluator{p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)}
	ctx := context.Background()
	s, err := evs[0].NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.EvalWith(ctx, `$v = add(1, 2)`, client.EvalOptions{Key: "e-race-pause", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("pause: %+v %v", res, err)
	}
	var wg sync.WaitGroup
	var ok, used atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := evs[i%2].Continue(ctx, "e-race-pause", client.Answer{Approve: true}, client.EvalOptions{Key: fmt.Sprintf("e-race-c-%d", i)})
			var ce *client.Error
			switch {
			case err == nil && res.Value == int64(3):
				ok.Add(1)
			case errors.As(err, &ce) && ce.Code == "already_continued":
				used.Add(1)
			default:
				t.Errorf("continue %d: %v %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || used.Load() != 7 || a.hits.Load() != 1 {
		t.Errorf("%d continues ran, %d already_continued, the tool ran %d times; want 1, 7, 1", ok.Load(), used.Load(), a.hits.Load())
	}
	if res, err := evs[1].Attach(s.ID()).Eval(ctx, `$v`); err != nil || res.Value != int64(3) {
		t.Errorf("the session after the race: %v %v", res, err)
	}
}

// TestPausedSessionOutlivesIdle: a session paused for an answer (a
// person's approval, which may take hours) is not an idle session: it
// waits past --eval-session-idle, as a paused eval waits for the
// retention, and its continue runs.
func TestPausedSessionOutlivesIdle(t *testing.T) {
	p1, p2 := startPgPairWith(t, executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t), SessionIdle: time.Second})
	a := newApp(t, gb.Limits{})
	ctx := context.Background()
	s, err := p1.client(t, p1.toks.a).Evaluator(a.rt).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.EvalWith(ctx, `$v = add(1, 2)`, client.EvalOptions{Key: "e-idle-pause", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("pause: %+v %v", res, err)
	}
	time.Sleep(3 * time.Second) // three idle timeouts, a dozen janitor rounds
	ev2 := p2.client(t, p2.toks.a).Evaluator(a.rt)
	if res, err := ev2.Continue(ctx, "e-idle-pause", client.Answer{Approve: true}, client.EvalOptions{}); err != nil || res.Value != int64(3) {
		t.Fatalf("continue after the idle timeout: %v %v", res, err)
	}
	if res, err := ev2.Attach(s.ID()).Eval(ctx, `$v`); err != nil || res.Value != int64(3) {
		t.Errorf("the session after the continue: %v %v", res, err)
	}
	// Not paused any more, it idles out as any session.
	time.Sleep(3 * time.Second)
	var ce *client.Error
	if _, err := ev2.Attach(s.ID()).Eval(ctx, `$v`); !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("the session idle past the timeout after its continue: %v, want not_found", err)
	}
}

// TestToolResultThroughOtherExecutorNoStateKey: the relay of tool
// answers between executors needs the shared store, not --state-key: on
// a PostgreSQL fleet without one, an answer reaching the other executor
// still reaches the eval.
func TestToolResultThroughOtherExecutorNoStateKey(t *testing.T) {
	p1, p2 := startPgPairWith(t, executor.EvalConfig{PoolSize: -1})
	c, st := splitClient(t, p1, p2)
	a := newApp(t, gb.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := c.Evaluator(a.rt).Eval(ctx, `add(1, 2)`); err != nil || res.Value != int64(3) {
		t.Errorf("an eval answered through the other executor: %v %v", res, err)
	}
	if st.relayed.Load() != 1 || a.hits.Load() != 1 {
		t.Errorf("%d answers through the other executor, the tool ran %d times; want 1 and 1", st.relayed.Load(), a.hits.Load())
	}
}

// TestRelayedAnswersBoundPerTenant: past 16 answers per eval, a tenant's
// running evals hold at most 16 × its max_concurrent_runs relayed
// answers in the store together (tenant b: 4 runs, 64), whichever
// executors run them.
func TestRelayedAnswersBoundPerTenant(t *testing.T) {
	p1, p2 := startPgPair(t)
	rt, release, called := gateTools(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	keys := []string{}
	for i := range 5 {
		p := p1
		if i == 4 {
			p = p2 // p1 runs 4 of b's evals at once, its most
		}
		key := fmt.Sprintf("e-tenant-bound-%d", i)
		keys = append(keys, key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.client(t, p.toks.b).Evaluator(rt).EvalWith(ctx, `gate("x")`, client.EvalOptions{Key: key})
		}()
		<-called
	}
	accepted := 0
	for i, key := range keys {
		p := p2
		if i == 4 {
			p = p1
		}
		for id := 100; id < 116; id++ {
			code, body := rawDo(t, p, p.toks.b, "POST", "/v1/evals/"+key+"/tool-results", fmt.Sprintf(`{"id": %d, "reply": "n"}`, id))
			switch code {
			case 202:
				accepted++
			case 429:
			default:
				t.Fatalf("answer %d for %s: %d %s", id, key, code, body)
			}
		}
	}
	if accepted != 64 {
		t.Errorf("%d relayed answers accepted for tenant b's 5 running evals, want 64 (16 × max_concurrent_runs 4)", accepted)
	}
}
