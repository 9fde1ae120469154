package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
	"github.com/gloveboxhq/glovebox/internal/pgtest"
)

// ExecutorFleet adds the row of a session's eval (`$n += 1`) through a
// fleet of two executors on one real PostgreSQL (started here, on a Unix
// socket) with stored sessions: each eval through the other executor
// than the session's last one (so each resumes the session's state from
// the store), beside evals through the same executor (its cached live
// session, one version check and one state write per eval), one client,
// one eval at a time; then relayRow on the same two executors.
func ExecutorFleet(ctx context.Context, row Row) {
	const what = "executor fleet: session eval through the other replica (`$n += 1`)"
	dir, err := os.MkdirTemp("", "glovebox-bench-fleet")
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	defer os.RemoveAll(dir)
	pg, err := pgtest.Start()
	if err != nil {
		row("-", what, "not available", err.Error(), "-", "-")
		return
	}
	defer pg.Stop()
	sec := make([]byte, 32)
	rand.Read(sec)
	keys, _ := glovebox.NewKeyring(glovebox.StateKey{ID: "bench", Secret: sec})
	tok, _, err := executor.MintToken()
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	b, err := bwrap.New(bwrap.Config{})
	if err != nil {
		row("-", what, "not available", err.Error(), "-", "-")
		return
	}
	var xs [2]*execServer
	for i := range xs {
		xs[i], err = startExecServerWith(ctx, dir, 1, b, pg.URL, func(c *executor.EvalConfig) { c.StateKeys = keys }, tok)
		if err != nil {
			row("-", what, "not available", err.Error(), "-", "-")
			return
		}
		defer xs[i].done()
	}
	rt, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1})
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	defer rt.Close()
	s0, err := xs[0].c.Evaluator(rt).NewSession(ctx)
	if err != nil {
		row("-", what, "failed", err.Error(), "-", "-")
		return
	}
	ss := [2]*client.Session{s0, xs[1].c.Evaluator(rt).Attach(s0.ID())}
	step := func(s *client.Session) error {
		res, err := s.Eval(ctx, "$n = ($n || 0) + 1")
		if err == nil && res.Status != glovebox.StatusOK {
			err = fmt.Errorf("%s %+v", res.Status, res.Error)
		}
		return err
	}
	for _, s := range ss { // warm: connections, each replica's tool set
		if err := step(s); err != nil {
			row("-", what, "failed", err.Error(), "-", "-")
			return
		}
	}
	other, err := load(1, execLoadN, execLoadMax, func(i int) error { return step(ss[i%2]) })
	if err != nil {
		row("-", what, "failed", err.Error(), "-", "-")
		return
	}
	same, err := load(1, execLoadN, execLoadMax, func(int) error { return step(ss[0]) })
	if err != nil {
		row("-", what, other.String(), "same replica failed: "+err.Error(), "-", "-")
		return
	}
	row("-", what, other.String(), "same replica "+same.String(), fmt.Sprintf("%.2f×", other.perSec/same.perSec), "-")
	relayRow(ctx, row, xs, tok)
}

// relayRow adds the row of an eval making one tool call (`add(1, 2)`)
// whose answer the client sends to the other executor than the one
// running the eval (as a Service may route the client's POST
// .../tool-results), which records it in the store for the running one
// to take, beside the same eval answered through its own executor; one
// client, one eval at a time.
func relayRow(ctx context.Context, row Row, xs [2]*execServer, tok string) {
	const what = "executor fleet: one tool call answered through the other replica (`add(1, 2)`)"
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(xs[0].cert)
	roots.AppendCertsFromPEM(xs[1].cert)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	tr.ForceAttemptHTTP2 = true
	defer tr.CloseIdleConnections()
	other, err := url.Parse(xs[1].url)
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	c, err := client.Dial(ctx, client.Config{URL: xs[0].url, Token: tok, HTTPClient: &http.Client{Transport: toOther{tr, other}}})
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	var tools glovebox.Toolset
	tools.Func("add", func(a, b int) int { return a + b })
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, PoolSize: -1})
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	defer rt.Close()
	relayed, direct := evalWith(ctx, c.Evaluator(rt), "add(1, 2)"), evalWith(ctx, xs[0].c.Evaluator(rt), "add(1, 2)")
	for _, f := range []func(int) error{relayed, direct} { // warm
		if err := f(0); err != nil {
			row("-", what, "failed", err.Error(), "-", "-")
			return
		}
	}
	r, err := load(1, execLoadN/4, execLoadMax, relayed)
	if err != nil {
		row("-", what, "failed", err.Error(), "-", "-")
		return
	}
	d, err := load(1, execLoadN/4, execLoadMax, direct)
	if err != nil {
		row("-", what, r.String(), "same replica failed: "+err.Error(), "-", "-")
		return
	}
	row("-", what, r.String(), "same replica "+d.String(), fmt.Sprintf("%.2f×", r.perSec/d.perSec), "-")
}

// toOther sends tool results to the other executor and everything else
// to the client's own.
type toOther struct {
	rt    http.RoundTripper
	other *url.URL
}

func (t toOther) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/tool-results") {
		r = r.Clone(r.Context())
		r.URL.Host, r.Host = t.other.Host, t.other.Host
	}
	return t.rt.RoundTrip(r)
}
