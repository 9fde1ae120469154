package executor_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// fleetKeys is a state keyring for the executors of one test.
func fleetKeys(t testing.TB) *gb.Keyring {
	sec := make([]byte, 32)
	rand.Read(sec)
	k, err := gb.NewKeyring(gb.StateKey{ID: "fleet-test", Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startStatePair starts two executors with evals, stored sessions and
// one state key, sharing one real PostgreSQL store.
func startStatePair(t *testing.T) (p1, p2 *inproc) {
	return startPgPairWith(t, executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)})
}

// TestSessionMovesBetweenExecutors: a session made through one executor
// goes on through the other and back, its variables intact each time
// (the second visit to the first executor finds its cached session
// stale and loads the stored version).
func TestSessionMovesBetweenExecutors(t *testing.T) {
	p1, p2 := startStatePair(t)
	a := newApp(t, gb.Limits{})
	e1, e2 := p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	s1, err := e1.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := e2.Attach(s1.ID())
	steps := []struct {
		s    *client.Session
		code string
		want int64
	}{
		{s1, "$n = add(1, 1)", 2},
		{s2, "$n = add($n, 1)", 3},
		{s2, "$n += 1", 4},
		{s1, "$n += 10", 14},
		{s2, "def twice(x) = x * 2; twice($n)", 28},
		{s1, "twice(add($n, 0))", 28},
	}
	for i, st := range steps {
		res, err := st.s.Eval(ctx, st.code)
		if err != nil || res.Status != gb.StatusOK || res.Value != st.want {
			t.Fatalf("step %d (%s): %v %v, want %d", i, st.code, res, err, st.want)
		}
	}
	if n := a.hits.Load(); n != 3 {
		t.Errorf("the tool ran %d times, want 3", n)
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Eval(ctx, "$n"); err == nil {
		t.Error("an eval of a session closed through the other executor ran")
	}
}

// TestPausedEvalContinuesElsewhereOnce: an eval paused at a tool call
// through one executor is continued through the other, which runs the
// approved tool (once) and finishes the program; a second continue,
// through either, is already_continued and runs nothing.
func TestPausedEvalContinuesElsewhereOnce(t *testing.T) {
	p1, p2 := startStatePair(t)
	a := newApp(t, gb.Limits{})
	e1, e2 := p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	code := `x = add(1, 2); y = add(x, 10); "#{x} #{y}"`
	res, err := e1.EvalWith(ctx, code, client.EvalOptions{Key: "e-paused-1", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended || res.Pending == nil || res.Pending.Name != "add" {
		t.Fatalf("first eval: %+v %v, want suspended at add", res, err)
	}
	if a.hits.Load() != 0 {
		t.Fatalf("the paused tool ran before the answer")
	}
	// Answer with a value: the call returns it without running the tool;
	// the program pauses again at its second call.
	res, err = e2.Continue(ctx, "e-paused-1", client.Answer{Value: int64(5)}, client.EvalOptions{Key: "e-paused-2"})
	if err != nil || res.Status != gb.StatusSuspended || res.Pending == nil {
		t.Fatalf("continue 1: %+v %v, want suspended again", res, err)
	}
	if fmt.Sprint(res.Pending.Args.Positional) != "[5 10]" {
		t.Errorf("second pause's args: %v", res.Pending.Args.Positional)
	}
	res, err = e1.Continue(ctx, "e-paused-2", client.Answer{Approve: true}, client.EvalOptions{Key: "e-paused-3"})
	if err != nil || res.Status != gb.StatusOK || res.Value != "5 15" {
		t.Fatalf("continue 2: %+v %v", res, err)
	}
	if n := a.hits.Load(); n != 1 {
		t.Errorf("the approved tool ran %d times, want 1", n)
	}
	// A retry of the same continuation key answers its record.
	if res, err := e2.Continue(ctx, "e-paused-2", client.Answer{Approve: true}, client.EvalOptions{Key: "e-paused-3"}); err != nil || res.Value != "5 15" {
		t.Errorf("retry of a continuation: %v %v", res, err)
	}
	for _, e := range []*client.Evaluator{e1, e2} {
		_, err := e.Continue(ctx, "e-paused-2", client.Answer{Approve: true}, client.EvalOptions{})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "already_continued" {
			t.Errorf("second continue: %v, want already_continued", err)
		}
	}
	if n := a.hits.Load(); n != 1 {
		t.Errorf("after refused continues the tool ran %d times, want 1", n)
	}
}

// TestStoredSessionSurvivesRestart: with a state key, a single SQLite
// executor's session outlives the process that made it.
func TestStoredSessionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	toks, tenants := mintTenants(t)
	keys := fleetKeys(t)
	start := func() *inproc {
		p := startInproc(t, 1, func(c *executor.Config) { c.StorePath, c.Tenants = filepath.Join(dir, "store.db"), tenants })
		p.toks = toks
		if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, StateKeys: keys}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := newApp(t, gb.Limits{})
	ctx := context.Background()
	p1 := start()
	s, err := p1.client(t, toks.a).Evaluator(a.rt).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, "$kept = 'across the restart'"); err != nil || res.Status != gb.StatusOK {
		t.Fatal(res, err)
	}
	p1.hs.Close()
	p1.srv.Close()
	p2 := start()
	res, err := p2.client(t, toks.a).Evaluator(a.rt).Attach(s.ID()).Eval(ctx, "$kept")
	if err != nil || res.Value != "across the restart" {
		t.Fatalf("after the restart: %v %v", res, err)
	}
}

// TestSessionLeaseLostIsLost: when a session's lease ran out during an
// eval and another executor took it, the eval's state is not stored, and
// its record says lost (not completed): the session goes on from before
// it, as its next eval shows.
func TestSessionLeaseLostIsLost(t *testing.T) {
	toks, tenants := mintTenants(t)
	p := startInproc(t, 1, func(c *executor.Config) { c.Tenants = tenants })
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)}); err != nil {
		t.Fatal(err)
	}
	var sid string
	var ts gb.Toolset
	ts.Add("steal", func(ctx context.Context, _ gb.Args) (any, error) {
		return nil, p.srv.StealSessionLease(tenants[0].Name, sid)
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	s, err := p.client(t, toks.a).Evaluator(rt).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid = s.ID()
	if res, err := s.Eval(ctx, "$n = 1"); err != nil || res.Status != gb.StatusOK {
		t.Fatal(res, err)
	}
	_, err = s.Eval(ctx, "$n = 2; steal")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "lost" || !strings.Contains(ce.Message, "could not be stored") {
		t.Fatalf("the eval whose lease was taken: %v, want lost", err)
	}
	if res, err := s.Eval(ctx, "$n"); err != nil || res.Value != int64(1) {
		t.Errorf("the session after: %v %v, want $n = 1 (the lost eval not applied)", res, err)
	}
}

// TestSessionPausesAndContinuesElsewhere: a session's eval pauses at a
// suspend tool through one executor; the session waits (its evals fail
// session_paused, running nothing); the answer arrives through the
// other executor, which loads the paused session from the store and
// runs the eval on (the approved tool once); the session then goes on,
// its variables from before and during the paused eval intact, through
// either executor; a second continue is already_continued.
func TestSessionPausesAndContinuesElsewhere(t *testing.T) {
	p1, p2 := startStatePair(t)
	a := newApp(t, gb.Limits{})
	e1, e2 := p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)
	ctx := context.Background()
	s1, err := e1.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s1.Eval(ctx, "$before = 1"); err != nil || res.Status != gb.StatusOK {
		t.Fatal(res, err)
	}
	res, err := s1.EvalWith(ctx, `$during = 2; $sum = add($before, 40); $after = $sum + $during`,
		client.EvalOptions{Key: "e-sess-pause", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended || res.Pending == nil || res.Pending.Name != "add" {
		t.Fatalf("the session's eval: %+v %v, want suspended at add", res, err)
	}
	if a.hits.Load() != 0 {
		t.Fatal("the paused tool ran before the answer")
	}
	s2 := e2.Attach(s1.ID())
	for _, s := range []*client.Session{s1, s2} {
		_, err := s.Eval(ctx, "$before")
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "session_paused" {
			t.Errorf("an eval of the paused session: %v, want session_paused", err)
		}
	}
	res, err = e2.Continue(ctx, "e-sess-pause", client.Answer{Approve: true}, client.EvalOptions{Key: "e-sess-pause-c"})
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(43) {
		t.Fatalf("continue through the other executor: %+v %v", res, err)
	}
	if n := a.hits.Load(); n != 1 {
		t.Errorf("the approved tool ran %d times, want 1", n)
	}
	for _, s := range []*client.Session{s1, s2, s1} {
		if res, err := s.Eval(ctx, "[$before, $during, $sum, $after]"); err != nil || fmt.Sprint(res.Value) != "[1 2 41 43]" {
			t.Errorf("the session after the continue: %v %v", res, err)
		}
	}
	_, err = e1.Continue(ctx, "e-sess-pause", client.Answer{Approve: true}, client.EvalOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "already_continued" {
		t.Errorf("a second continue: %v, want already_continued", err)
	}
	// A suspend tool the session does not have is refused.
	_, err = s1.EvalWith(ctx, "1", client.EvalOptions{Suspend: []string{"nope"}})
	if !errors.As(err, &ce) || ce.Code != "bad_request" {
		t.Errorf("suspend_tools naming no tool of the session: %v, want bad_request", err)
	}
	// Denied: the guest sees Glovebox::ToolDenied and the session goes on.
	res, err = s2.EvalWith(ctx, `begin; add(1, 1); rescue => e; $denied = e.class.name; end`, client.EvalOptions{Key: "e-sess-deny", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("second pause: %+v %v", res, err)
	}
	if _, err := e1.Continue(ctx, "e-sess-deny", client.Answer{Deny: "no"}, client.EvalOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, err := s2.Eval(ctx, "$denied"); err != nil || res.Value != "Glovebox::ToolDenied" {
		t.Errorf("after a denied continue: %v %v", res, err)
	}
}

// TestSessionCapAcrossFleet: a tenant's MaxSessions holds across two
// executors on one PostgreSQL, with creations racing through both.
func TestSessionCapAcrossFleet(t *testing.T) {
	p1, p2 := startPgPairWith(t, executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t), MaxSessions: 3})
	a := newApp(t, gb.Limits{})
	evs := []*client.Evaluator{p1.client(t, p1.toks.a).Evaluator(a.rt), p2.client(t, p2.toks.a).Evaluator(a.rt)}
	ctx := context.Background()
	var wg sync.WaitGroup
	var made, full atomic.Int64
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := evs[i%2].NewSession(ctx)
			var ce *client.Error
			switch {
			case err == nil:
				made.Add(1)
			case errors.As(err, &ce) && ce.Code == "queue_full":
				full.Add(1)
			default:
				t.Errorf("session %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if made.Load() != 3 || full.Load() != 7 {
		t.Errorf("%d sessions made, %d refused queue_full; want 3 and 7 (MaxSessions 3, fleet-wide)", made.Load(), full.Load())
	}
}

// TestContinueStoppedBeforeTheCallStaysContinuable: a continuation
// canceled while its replay was still on the way to the paused call
// (DELETE of its eval) claimed nothing, so the next continuation of the
// same pause answers it; the approved tool runs once (issue: a continue
// that could not replay used up the one continuation and the paused
// work was lost).
func TestContinueStoppedBeforeTheCallStaysContinuable(t *testing.T) {
	toks, tenants := mintTenants(t)
	p := startInproc(t, 1, func(c *executor.Config) { c.Tenants = tenants })
	p.toks = toks
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t),
		Limits: gb.Limits{Timeout: 2 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	a := newApp(t, gb.Limits{Timeout: 2 * time.Minute})
	e := p.client(t, toks.a).Evaluator(a.rt)
	ctx := context.Background()
	// The loop before the call makes the replay long enough to stop.
	code := `i = 0; while i < 15_000_000; i += 1; end; add(i, 2)`
	res, err := e.EvalWith(ctx, code, client.EvalOptions{Key: "e-long-paused", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("first eval: %+v %v, want suspended", res, err)
	}
	done := make(chan *gb.Result, 1)
	go func() {
		res, err := e.Continue(ctx, "e-long-paused", client.Answer{Approve: true}, client.EvalOptions{Key: "e-cont-stopped"})
		if err != nil {
			t.Logf("the stopped continuation: %v", err)
		}
		done <- res
	}()
	time.Sleep(300 * time.Millisecond)
	req, _ := http.NewRequest(http.MethodDelete, p.hs.URL+"/v1/evals/e-cont-stopped", nil)
	req.Header.Set("Authorization", "Bearer "+toks.a)
	if resp, err := p.hs.Client().Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if res := <-done; res != nil && res.Status == gb.StatusOK {
		t.Skipf("the replay reached the call before the cancel (a machine this fast needs a longer loop): %+v", res)
	}
	if n := a.hits.Load(); n != 0 {
		t.Fatalf("the tool ran %d times in a continuation stopped before its call", n)
	}
	res, err = e.Continue(ctx, "e-long-paused", client.Answer{Approve: true}, client.EvalOptions{Key: "e-cont-again"})
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(15_000_002) {
		t.Fatalf("continuing again after the stopped one: %+v %v", res, err)
	}
	if n := a.hits.Load(); n != 1 {
		t.Errorf("the approved tool ran %d times, want 1", n)
	}
}
