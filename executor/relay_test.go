package executor_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// splitTransport sends tool results to other and everything else to
// the client's own executor, as a Service may spread a client's
// connections over the replicas.
type splitTransport struct {
	rt      http.RoundTripper
	other   *url.URL
	relayed atomic.Int64
}

// splitClient is tenant a's client of p1 whose tool results go to p2
// (splitTransport), over HTTP/2 trusting both executors' certificates.
func splitClient(t *testing.T, p1, p2 *inproc) (*client.Client, *splitTransport) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p1.hs.Certificate())
	pool.AddCert(p2.hs.Certificate())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	tr.ForceAttemptHTTP2 = true
	t.Cleanup(tr.CloseIdleConnections)
	other, _ := url.Parse(p2.hs.URL)
	st := &splitTransport{rt: tr, other: other}
	c, err := client.Dial(context.Background(), client.Config{URL: p1.hs.URL, Token: p1.toks.a, HTTPClient: &http.Client{Transport: st}})
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

func (s *splitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/tool-results") {
		r = r.Clone(r.Context())
		r.URL.Host, r.Host = s.other.Host, s.other.Host
		s.relayed.Add(1)
	}
	return s.rt.RoundTrip(r)
}

// TestToolResultThroughOtherExecutor: two executors on one PostgreSQL;
// the eval streams from one while every tool answer reaches the other,
// which records it in the store; the running one picks it up, and the
// eval ends as it would have (each tool run once), for a plain eval and
// for a session's.
func TestToolResultThroughOtherExecutor(t *testing.T) {
	p1, p2 := startStatePair(t)
	c, st := splitClient(t, p1, p2)
	a := newApp(t, gb.Limits{})
	ev := c.Evaluator(a.rt)
	ctx := context.Background()
	res, err := ev.Eval(ctx, `x = add(1, 2); add(x, 10)`)
	if err != nil || res.Value != int64(13) {
		t.Fatalf("eval: %v %v", res, err)
	}
	s, err := ev.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, `$n = add(20, 22)`); err != nil || res.Value != int64(42) {
		t.Fatalf("session eval: %v %v", res, err)
	}
	if n := a.hits.Load(); n != 3 {
		t.Errorf("the tools ran %d times, want 3", n)
	}
	if n := st.relayed.Load(); n != 3 {
		t.Errorf("%d answers went through the other executor, want 3", n)
	}
	// An answer for an eval that runs nowhere is not_found, as before.
	if code, body := rawDo(t, p2, p2.toks.a, "POST", "/v1/evals/e-runs-nowhere/tool-results", `{"id": 1, "reply": "n"}`); code != 404 {
		t.Errorf("an answer for no running eval: %d %s", code, body)
	}
}

// TestRelayedAnswerByNotification: with the waiting calls' own looks in
// the store put off for an hour, answers through the other executor
// still arrive, by the word (NOTIFY) the receiving executor sends: the
// eval ends, well inside its context's minute, each tool run once.
func TestRelayedAnswerByNotification(t *testing.T) {
	defer executor.SetRelayPoll(time.Hour, time.Hour)()
	p1, p2 := startStatePair(t)
	c, st := splitClient(t, p1, p2)
	a := newApp(t, gb.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Evaluator(a.rt).Eval(ctx, `x = add(1, 2); add(x, 10)`)
	if err != nil || res.Value != int64(13) {
		t.Fatalf("eval: %v %v", res, err)
	}
	if n := a.hits.Load(); n != 2 {
		t.Errorf("the tools ran %d times, want 2", n)
	}
	if n := st.relayed.Load(); n != 2 {
		t.Errorf("%d answers went through the other executor, want 2", n)
	}
}
