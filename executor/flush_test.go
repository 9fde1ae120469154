package executor_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// flushCounter counts the flushes a handler asks for.
type flushCounter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (f flushCounter) FlushError() error {
	f.n.Add(1)
	return http.NewResponseController(f.ResponseWriter).Flush()
}

func (f flushCounter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// TestQuickAnswerInOneWrite: an eval or a run that ends before its
// accepted event is due goes out in one write, with the end of the
// stream (no flush of its own for accepted, holder or result: three
// before); a tool call is still flushed at once (the eval waits for its
// answer), and a quiet job's accepted event is flushed alone after
// acceptedDelay.
func TestQuickAnswerInOneWrite(t *testing.T) {
	defer executor.SetAcceptedDelay(time.Hour)()
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{}); err != nil {
		t.Fatal(err)
	}
	var flushes atomic.Int64
	h := p.srv.Handler()
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(flushCounter{w, &flushes}, r)
	}))
	hs.EnableHTTP2 = true
	hs.StartTLS()
	defer hs.Close()
	pool := x509.NewCertPool()
	pool.AddCert(hs.Certificate())
	c, err := client.Dial(context.Background(), client.Config{URL: hs.URL, Token: p.toks.a, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	ev := c.Evaluator(newApp(t, gb.Limits{}).rt)
	ctx := context.Background()
	if res, err := ev.Eval(ctx, "1+1"); err != nil || res.Value != int64(2) {
		t.Fatalf("1+1: %+v %v", res, err)
	}
	if n := flushes.Swap(0); n != 0 {
		t.Errorf("1+1 was flushed %d times, want 0 (its answer goes with the end of the stream)", n)
	}
	if res, err := c.Run(ctx, remote.Request{Command: box.Command{Argv: []string{"true"}}}); err != nil || !res.OK() {
		t.Fatalf("true: %+v %v", res, err)
	}
	if n := flushes.Swap(0); n != 0 {
		t.Errorf("a run of true was flushed %d times, want 0", n)
	}
	if res, err := ev.Eval(ctx, "add(1, 2)"); err != nil || res.Value != int64(3) {
		t.Fatalf("add(1, 2): %+v %v", res, err)
	}
	if n := flushes.Swap(0); n < 1 {
		t.Errorf("an eval with a tool call was flushed %d times, want its tool call flushed", n)
	}
	// A quiet job: its accepted event goes out alone while it runs.
	executor.SetAcceptedDelay(time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, remote.Request{IdempotencyKey: "quiet", Command: box.Command{Argv: []string{"sleep", "60"}}})
		done <- err
	}()
	waitFor(t, func() bool { return flushes.Load() == 1 })
	if _, err := c.Cancel(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
