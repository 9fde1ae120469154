package executor_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestFleetMisconfiguredStateKeySaysSo: a replica sharing the fleet's
// PostgreSQL store but given another --state-key file, or none, cannot
// run a session its peers stored; its refusal names the state key, the
// operator's mistake, rather than tampering or a session that is gone.
// The session itself is untouched and goes on through a replica holding
// the key.
func TestFleetMisconfiguredStateKeySaysSo(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	good := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)})
	sec := make([]byte, 32)
	rand.Read(sec)
	other, err := gb.NewKeyring(gb.StateKey{ID: "another-key", Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	wrongKey := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1, StateKeys: other})
	noKey := pgExecutor(t, url, toks, tenants, executor.EvalConfig{PoolSize: -1})
	ctx := context.Background()
	a := newApp(t, gb.Limits{})
	s, err := good.client(t, toks.a).Evaluator(a.rt).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, `$n = 1`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    *inproc
		code string
	}{{"another state key", wrongKey, "state_refused"}, {"no state key", noKey, "not_found"}} {
		_, err := c.p.client(t, toks.a).Evaluator(a.rt).Attach(s.ID()).Eval(ctx, `$n += 1`)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(ce.Message, "--state-key") {
			t.Errorf("%s: %v, want %s naming --state-key", c.name, err, c.code)
		}
	}
	res, err := good.client(t, toks.a).Evaluator(a.rt).Attach(s.ID()).Eval(ctx, `$n += 1`)
	if err != nil || res.Value != int64(2) {
		t.Errorf("the session through a replica with the key: %v %v, want 2", res, err)
	}
}

// TestRelayedDuplicateAnswerSaysSo: a second answer to one call through
// the executor not running the eval is refused naming the earlier
// answer, and one past the eval's bound naming the bound: a client
// cannot otherwise tell a repeat of its own answer from a full relay.
func TestRelayedDuplicateAnswerSaysSo(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	cfg := executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t)}
	p1, p2 := pgExecutor(t, url, toks, tenants, cfg), pgExecutor(t, url, toks, tenants, cfg)
	rt, release, called := gateTools(t)
	const key = "e-relay-dup"
	done := make(chan error, 1)
	go func() {
		_, err := p1.client(t, toks.a).Evaluator(rt).EvalWith(context.Background(), `gate("x")`, client.EvalOptions{Key: key})
		done <- err
	}()
	<-called
	post := func(id int) (int, string) {
		return rawDo(t, p2, toks.a, "POST", "/v1/evals/"+key+"/tool-results", fmt.Sprintf(`{"id": %d, "reply": "n"}`, id))
	}
	if code, body := post(100); code != 202 {
		t.Fatalf("first answer to call 100: %d %s", code, body)
	}
	if code, body := post(100); code != 429 || !strings.Contains(body, "call 100 has an answer recorded already") {
		t.Errorf("second answer to call 100: %d %s, want 429 naming the earlier answer", code, body)
	}
	for id := 101; id < 116; id++ {
		if code, body := post(id); code != 202 {
			t.Fatalf("answer %d: %d %s", id, code, body)
		}
	}
	if code, body := post(116); code != 429 || !strings.Contains(body, "16 answers waiting") || strings.Contains(body, "recorded already") {
		t.Errorf("answer 116, past the bound: %d %s, want 429 naming the bound", code, body)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeleteThroughOtherExecutorRefused: DELETE of an eval running on
// another executor of the fleet is refused unavailable (that executor
// alone can stop it) rather than answered 200 with the running record,
// which read as a cancel; through the executor running it, it cancels.
func TestDeleteThroughOtherExecutorRefused(t *testing.T) {
	url := executor.StartPostgres(t)
	toks, tenants := mintTenants(t)
	cfg := executor.EvalConfig{PoolSize: -1}
	p1, p2 := pgExecutor(t, url, toks, tenants, cfg), pgExecutor(t, url, toks, tenants, cfg)
	rt, release, called := gateTools(t)
	const key = "e-delete-elsewhere"
	done := make(chan error, 1)
	go func() {
		_, err := p1.client(t, toks.a).Evaluator(rt).EvalWith(context.Background(), `gate("x")`, client.EvalOptions{Key: key})
		done <- err
	}()
	<-called
	if code, body := rawDo(t, p2, toks.a, "DELETE", "/v1/evals/"+key, ""); code != 503 || !strings.Contains(body, "not canceled") {
		t.Errorf("DELETE through the other executor: %d %s, want 503 saying it was not canceled", code, body)
	}
	if code, body := rawDo(t, p2, toks.b, "DELETE", "/v1/evals/"+key, ""); code != 404 {
		t.Errorf("another tenant's DELETE through the other executor: %d %s, want 404", code, body)
	}
	if code, body := rawDo(t, p1, toks.a, "DELETE", "/v1/evals/"+key, ""); code != 200 || !strings.Contains(body, `"state":"completed"`) {
		t.Errorf("DELETE through the executor running it: %d %s, want its final record", code, body)
	}
	close(release) // the client's tool call, which the cancel left waiting
	<-done
}
