package executor_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestLimitsQueueExpiryMetricsDrain: with tenant b allowed 1 running and
// 2 queued runs, a fourth is queue_full and leaves no record; a queued run
// whose deadline passes ends "expired" without running; /metrics shows the
// queue; draining turns /readyz and new runs to 503.
func TestLimitsQueueExpiryMetricsDrain(t *testing.T) {
	cnt := newCounter(t)
	release := make(chan struct{})
	mux := http.NewServeMux()
	var gated atomic.Int32
	mux.HandleFunc("/gate", func(w http.ResponseWriter, r *http.Request) { gated.Add(1); <-release })
	mux.HandleFunc("/hit/", func(w http.ResponseWriter, r *http.Request) { cnt.n.Add(1) })
	cnt.srv.Config.Handler = mux
	p := startInproc(t, cnt.port, func(c *executor.Config) {
		c.Tenants[1].MaxConcurrentRuns, c.Tenants[1].MaxQueuedRuns = 1, 2
	})
	cb := p.client(t, p.toks.b)
	ctx := context.Background()
	net := box.Network{Allow: []string{"127.0.0.1"}}
	gate := fmt.Sprintf(`python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d/gate').read()"`, cnt.port)
	errs := make(chan error, 3)
	run := func(ctx context.Context, key, shell string) {
		_, err := cb.Run(ctx, remote.Request{IdempotencyKey: key, Command: box.Command{Shell: shell, Network: net}})
		errs <- err
	}
	state := func(key string) string { s, _, _ := cb.State(ctx, key); return s }
	go run(ctx, "q1", gate)
	waitFor(t, func() bool { return state("q1") == "running" })
	// Shown running, q1 may not hold its slot yet (a slot looked free);
	// q2 must arrive once it runs, or q2 may take the slot first.
	waitFor(t, func() bool { return gated.Load() == 1 })
	go run(ctx, "q2", "echo two")
	waitFor(t, func() bool { return state("q2") == "queued" })
	// q3's deadline must outlast the checks below on a loaded machine
	// (3 s did not: q3 expired before /metrics was read, in CI).
	dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	go run(dctx, "q3", cnt.hitShell("q3"))
	waitFor(t, func() bool { return state("q3") == "queued" })

	_, err := cb.Run(ctx, remote.Request{IdempotencyKey: "q4", Command: box.Command{Shell: "echo four"}})
	wantCode(t, err, "queue_full", 429)
	if _, _, err := cb.State(ctx, "q4"); err == nil {
		t.Error("a refused run left a record")
	}
	metrics := get(t, p, "/metrics", "")
	for _, want := range []string{`glovebox_executor_queue_depth{kind="run"} 2`, `glovebox_executor_running{kind="run"} 1`, `glovebox_executor_refused_total{code="queue_full"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// q3's deadline passes while it waits behind q1.
	waitFor(t, func() bool { return state("q3") == "expired" })
	// Its client's context ends at the same instant: it reads either the
	// record (run_expired) or, when its context won, an in-doubt error.
	var ce *client.Error
	if err := <-errs; !errors.As(err, &ce) || !(ce.InDoubt() || ce.Code == "run_expired") {
		t.Errorf("q3's client: want run_expired or in doubt, got %v", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if _, code, _ := cb.State(ctx, "q3"); code != "run_expired" || cnt.n.Load() != 0 {
		t.Errorf("q3: code %s, ran %d times", code, cnt.n.Load())
	}
	if !strings.Contains(get(t, p, "/metrics", ""), `glovebox_executor_runs_total{backend="bwrap",kind="run",status="expired"} 1`) {
		t.Error("metrics lack the expired run")
	}

	if get(t, p, "/healthz", "") != "ok\n" || get(t, p, "/readyz", "") != "ready\n" {
		t.Error("not healthy and ready")
	}
	if body := get(t, p, "/v1/runs", p.toks.a); !strings.Contains(body, "method_not_allowed") {
		t.Errorf("GET /v1/runs: %s", body)
	}
	p.srv.Drain(ctx)
	if body := get(t, p, "/readyz", ""); !strings.Contains(body, "unavailable") {
		t.Errorf("draining /readyz: %s", body)
	}
	_, err = cb.Run(ctx, remote.Request{Command: box.Command{Shell: "echo late"}})
	wantCode(t, err, "unavailable", 503)
}

// TestOutputsPerTenant: a run's outputs are readable by its tenant only.
func TestOutputsPerTenant(t *testing.T) {
	p := startInproc(t, 1, nil)
	ca, cb := p.client(t, p.toks.a), p.client(t, p.toks.b)
	ctx := context.Background()
	cmd := box.Command{Shell: "mkdir -p outputs && echo private > outputs/p.txt"}
	if _, err := ca.Run(ctx, remote.Request{IdempotencyKey: "out", Command: cmd}); err != nil {
		t.Fatal(err)
	}
	if data, err := ca.Output(ctx, "out", "p.txt"); err != nil || string(data) != "private\n" {
		t.Fatalf("%q %v", data, err)
	}
	_, err := cb.Output(ctx, "out", "p.txt")
	wantCode(t, err, "not_found", 404)
	_, err = ca.Output(ctx, "out", "missing.txt")
	wantCode(t, err, "not_found", 404)
	// A retry of the finished run is answered from the record.
	res, err := ca.Retry(ctx, remote.Request{Command: cmd}, &client.Error{Key: "out"})
	if err != nil || string(res.Outputs["p.txt"]) != "private\n" {
		t.Fatalf("retry: %v %v", res, err)
	}
}

func get(t *testing.T, p *inproc, path, tok string) string {
	t.Helper()
	_, body := rawDo(t, p, tok, "GET", path, "")
	return body
}

// TestCancel: DELETE kills a running command (no process survives) and the
// run's own stream gets the canceled result.
func TestCancel(t *testing.T) {
	p := startInproc(t, 1, nil)
	c := p.client(t, p.toks.a)
	ctx := context.Background()
	const marker = "27.1828"
	done := make(chan *box.Result, 1)
	go func() {
		res, err := c.Run(ctx, remote.Request{IdempotencyKey: "c1", Command: box.Command{Shell: "sleep " + marker}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitFor(t, func() bool { return sleeping(marker) })
	st, err := c.Cancel(ctx, "c1")
	if err != nil || st != "completed" {
		t.Fatalf("cancel: %s %v", st, err)
	}
	res := <-done
	if res == nil || !res.Canceled || res.ExitStatus != 137 || sleeping(marker) {
		t.Errorf("cancelled run: %+v, still sleeping %v", res, sleeping(marker))
	}
	if _, err := c.Cancel(ctx, "never"); err == nil {
		t.Error("cancelling an unknown key succeeded")
	}
}

// TestGVisorBackend: the same contract over the gVisor backend; the
// client learns its isolation from /v1/info.
func TestGVisorBackend(t *testing.T) {
	g, err := gvisor.New(gvisor.Config{})
	if err != nil {
		t.Skipf("runsc is not installed: %v", err)
	}
	p := startInproc(t, 1, func(c *executor.Config) { c.Backend = g })
	c := p.client(t, p.toks.a)
	if c.Isolation() != box.IsolationGVisor || c.Backend() != "gvisor" {
		t.Errorf("info: %s %s", c.Backend(), c.Isolation())
	}
	var streamed strings.Builder
	res, err := remote.New(c, nil).Run(context.Background(), box.Command{Shell: "echo in-gvisor; uname -r >&2",
		Stream: func(s int, p []byte) {
			if s == 1 {
				streamed.Write(p)
			}
		}})
	if err != nil || res.Stdout != "in-gvisor\n" || streamed.String() != res.Stdout || res.Isolation != box.IsolationGVisor || !res.OffHost() {
		t.Fatalf("%+v %v", res, err)
	}
}
