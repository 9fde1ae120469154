package executor_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestSessionStatesHoldQuota: tenant a's max_stored_bytes holds for
// sessions' states, on one SQLite executor and on two executors sharing
// one PostgreSQL: a burst of session evals through every executor, each
// leaving about 1 MB of state, never stores more than the quota (records
// and states, read from the store itself); an eval whose state did not
// fit completed and says session_reset (its session's next eval starts
// afresh, and is not told again); once the sessions are closed, the
// quota counts nothing of their states, and a new session's state fits.
func TestSessionStatesHoldQuota(t *testing.T) {
	const quota = 4 << 20
	small := gb.Limits{Stdout: 4096, Stderr: 4096, Value: 4096} // eval records reserve little
	cfg := executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t), Limits: small}
	withQuota := func(c *executor.Config) {
		c.Tenants[0].MaxStoredBytes = quota
	}
	t.Run("sqlite", func(t *testing.T) {
		p := startInproc(t, 1, withQuota)
		if err := p.srv.EnableEvals(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		sessionQuotaBurst(t, quota, []*inproc{p})
	})
	t.Run("postgres", func(t *testing.T) {
		url := executor.StartPostgres(t)
		toks, tenants := mintTenants(t)
		tenants[0].MaxStoredBytes = quota
		sessionQuotaBurst(t, quota, []*inproc{pgExecutor(t, url, toks, tenants, cfg), pgExecutor(t, url, toks, tenants, cfg)})
	})
}

func sessionQuotaBurst(t *testing.T, quota int64, ps []*inproc) {
	ctx := context.Background()
	a := newApp(t, gb.Limits{})
	evs := make([]*client.Evaluator, len(ps))
	for i, p := range ps {
		evs[i] = p.client(t, p.toks.a).Evaluator(a.rt)
	}
	stored := func(when string) {
		t.Helper()
		r, s, err := ps[0].srv.StoredBytes("a")
		if err != nil {
			t.Fatal(err)
		}
		if r+s > quota {
			t.Errorf("%s: tenant a's store holds %d bytes of records and %d of states, past its quota of %d", when, r, s, quota)
		}
		t.Logf("%s: records %d, states %d bytes", when, r, s)
	}
	const sessions = 8
	ids := make([]string, sessions)
	for i := range ids {
		s, err := evs[i%len(evs)].NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID()
	}
	var mu sync.Mutex
	kept, refused, resets := 0, 0, map[string]bool{} // resets: sessions whose last eval reset them
	for round := range 3 {
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := evs[(i+round)%len(evs)].Attach(id)
				// The old string collected first, so the state holds one.
				res, err := s.Eval(ctx, fmt.Sprintf("$b = nil; GC.start; $b = Random.new(%d).bytes(1_000_000); $b.size", i*10+round))
				var ce *client.Error
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.As(err, &ce) && ce.Code == "quota_exceeded":
					refused++ // the tenant full: refused before it ran
				case err != nil || res.Status != gb.StatusOK || res.Value != int64(1_000_000):
					t.Errorf("round %d, session %d: %v %v", round, i, res, err)
				case res.SessionReset:
					resets[id] = true
				default:
					kept++
					delete(resets, id)
				}
			}()
		}
		wg.Wait()
		stored(fmt.Sprintf("after round %d", round))
	}
	t.Logf("%d evals kept their state, %d were refused, %d sessions left reset", kept, refused, len(resets))
	if kept == 0 || len(resets) == 0 {
		t.Fatalf("%d evals kept their state, %d sessions were left reset: want some of each (quota %d)", kept, len(resets), quota)
	}
	// A reset session starts afresh, and says so once only. Its new
	// state needs room: when four sessions kept theirs they hold nearly
	// the whole quota (the next state not fitting would rightly reset it
	// again), so those are closed first.
	closed := map[string]bool{}
	for _, id := range ids {
		if !resets[id] {
			if err := evs[1%len(evs)].Attach(id).Close(ctx); err != nil {
				t.Fatal(err)
			}
			closed[id] = true
		}
	}
	for id := range resets {
		res, err := evs[0].Attach(id).Eval(ctx, "$b.nil?")
		if err != nil || res.Value != true || res.SessionReset {
			t.Errorf("the eval after a reset: %v %v (want true, not reset again)", res, err)
		}
	}
	for _, id := range ids {
		if closed[id] {
			continue
		}
		if err := evs[1%len(evs)].Attach(id).Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		if err := p.srv.Recount(); err != nil {
			t.Fatal(err)
		}
	}
	if _, s, err := ps[0].srv.StoredBytes("a"); err != nil || s != 0 {
		t.Errorf("closed sessions' states still stored: %d bytes, %v", s, err)
	}
	records, _, _ := ps[0].srv.StoredBytes("a")
	for i, p := range ps {
		if n := p.srv.QuotaCounted("a"); n != records {
			t.Errorf("executor %d counts %d bytes against the quota with every session closed, want the records' %d", i, n, records)
		}
	}
	s, err := evs[len(evs)-1].NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Eval(ctx, "$b = Random.new(99).bytes(1_000_000); $b.size")
	if err != nil || res.Status != gb.StatusOK || res.SessionReset {
		t.Errorf("a new session after the others closed: %v %v (want its state kept)", res, err)
	}
	stored("at the end")
}

// TestPauseOverQuotaRefused: an eval that pauses with a state its
// tenant's quota has no room for (a session's state holds most of it)
// ends failed quota_exceeded, nothing kept: a continue finds no pause,
// the call never ran; in a session, the session is reset as well (not
// left paused), and its next eval runs afresh.
func TestPauseOverQuotaRefused(t *testing.T) {
	p := startInproc(t, 1, func(c *executor.Config) { c.Tenants[0].MaxStoredBytes = 1 << 20 })
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t),
		Limits: gb.Limits{Stdout: 4096, Stderr: 4096, Value: 4096}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	s, err := ev.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, "$kept = Random.new(3).bytes(50_000); 1"); err != nil || res.Status != gb.StatusOK || res.SessionReset {
		t.Fatal(res, err)
	}
	full, err := ev.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := full.Eval(ctx, "$b = Random.new(1).bytes(800_000); $b.size"); err != nil || res.Status != gb.StatusOK || res.SessionReset {
		t.Fatalf("filling the quota: %v %v", res, err)
	}
	// A paused eval's state holds its code (a replay, not its memory).
	noise := make([]byte, 150_000)
	rand.Read(noise)
	code := fmt.Sprintf("x = %q; add(1, 2); x.size", hex.EncodeToString(noise))
	_, err = ev.EvalWith(ctx, code, client.EvalOptions{Key: "e-big", Suspend: []string{"add"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "quota_exceeded" || !strings.Contains(ce.Message, "cannot be continued") {
		t.Fatalf("a pause past the quota: %v, want quota_exceeded", err)
	}
	if _, err := ev.Continue(ctx, "e-big", client.Answer{Approve: true}, client.EvalOptions{Key: "e-big-c"}); !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("continuing it: %v, want not_found", err)
	}
	// A paused session's state is the session's, and the code it replays.
	_, err = s.EvalWith(ctx, code, client.EvalOptions{Suspend: []string{"add"}})
	if !errors.As(err, &ce) || ce.Code != "quota_exceeded" || !strings.Contains(ce.Message, "session is reset") {
		t.Fatalf("a session's pause past the quota: %v, want quota_exceeded saying the session is reset", err)
	}
	res, err := s.Eval(ctx, "$kept.nil?")
	if err != nil || res.Status != gb.StatusOK || res.Value != true || res.SessionReset {
		t.Errorf("the session's next eval: %v %v, want it afresh (and not told again)", res, err)
	}
	if n := a.hits.Load(); n != 0 {
		t.Errorf("the paused calls ran %d times", n)
	}
}
