package executor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// The remote evaluator has codemode.Evaluator's shape.
var (
	_ codemode.Evaluator = (*client.Evaluator)(nil)
	_ codemode.Evaluator = (*client.Session)(nil)
)

// startEvals is an in-process executor on loopback TLS with evals on.
func startEvals(t testing.TB) *inproc {
	t.Helper()
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1}); err != nil {
		t.Fatal(err)
	}
	return p
}

// app is the client side: a local Runtime whose tools run in this
// process, with hooks that record what they see.
type app struct {
	rt     *gb.Runtime
	mu     sync.Mutex
	log    []string // tool runs, hook calls and output, in order
	hits   atomic.Int64
	before atomic.Int64
	after  atomic.Int64
}

func (a *app) note(s string) {
	a.mu.Lock()
	a.log = append(a.log, s)
	a.mu.Unlock()
}

func (a *app) Write(p []byte) (int, error) { a.note("out:" + string(p)); return len(p), nil }

// errWriter notes the guest's stderr in the same log.
type errWriter struct{ a *app }

func (w errWriter) Write(p []byte) (int, error) { w.a.note("err:" + string(p)); return len(p), nil }

// notes is the log with consecutive output pieces of one stream joined
// (puts writes the text and the newline separately, and the executor
// coalesces writes into events as it likes).
func (a *app) notes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, n := range a.log {
		if k := len(out) - 1; k >= 0 && len(n) > 4 && (n[:4] == "out:" || n[:4] == "err:") && strings.HasPrefix(out[k], n[:4]) {
			out[k] += n[4:]
			continue
		}
		out = append(out, n)
	}
	return out
}

type notFound struct{}

func newApp(t testing.TB, lim gb.Limits) *app {
	t.Helper()
	a := &app{}
	var ts gb.Toolset
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts.Func("add", func(x, y int) int {
		a.hits.Add(1)
		a.note(fmt.Sprintf("tool:add(%d,%d)", x, y))
		return x + y
	}))
	must(ts.Func("lookup", func(id string, opts map[string]any) (map[string]any, error) {
		a.hits.Add(1)
		a.note("tool:lookup(" + id + ")")
		if id == "missing" {
			return nil, &gb.ToolError{Class: "NotFound", Message: "no order " + id}
		}
		if id == "boom" {
			return nil, errors.New("database down")
		}
		return map[string]any{"id": id, "total": 12.5, "big": "x", "opts": opts}, nil
	}))
	must(ts.Add("delete_all", func(context.Context, gb.Args) (any, error) { a.hits.Add(1); return "deleted", nil }))
	ts.RequireApproval("delete_all")
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, Limits: lim, PoolSize: -1, Hooks: gb.Hooks{
		BeforeCall: func(ctx context.Context, tool string, args gb.Args) error {
			a.before.Add(1)
			if tool == "add" && len(args.Positional) > 0 && args.Positional[0] == int64(13) {
				return errors.New("13 is vetoed by the client's hook")
			}
			return nil
		},
		AfterCall: func(ctx context.Context, c gb.ToolCall) { a.after.Add(1) },
	}})
	must(err)
	t.Cleanup(func() { rt.Close() })
	a.rt = rt
	return a
}

// TestEvalToolsCalledBackOnClient: the guest runs on the executor; its
// tool calls run here, through this Runtime's hooks, and the transcript
// is the client's; stdout and tool calls arrive in the order the guest
// made them.
func TestEvalToolsCalledBackOnClient(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	code := `puts "one"
x = add(1, 2)
puts "two #{x}"
$stderr.puts "warn"
o = lookup("A7", verbose: true)
puts "three #{o["total"]}"
[x, o["id"], o["opts"]]`
	res, err := ev.EvalWith(context.Background(), code, client.EvalOptions{Stdout: a, Stderr: errWriter{a}})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	if fmt.Sprint(res.Value) != "[3 A7 map[verbose:true]]" {
		t.Errorf("value %v", res.Value)
	}
	if res.Stdout != "one\ntwo 3\nthree 12.5\n" || res.Stderr != "warn\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	want := []string{"out:one\n", "tool:add(1,2)", "out:two 3\n", "err:warn\n", "tool:lookup(A7)", "out:three 12.5\n"}
	if got := a.notes(); !slices.Equal(got, want) {
		t.Errorf("order on the client:\n got %q\nwant %q", got, want)
	}
	if a.before.Load() != 2 || a.after.Load() != 2 {
		t.Errorf("hooks ran %d/%d times, want 2/2", a.before.Load(), a.after.Load())
	}
	if len(res.ToolCalls) != 2 || res.ToolCalls[0].Name != "add" || fmt.Sprint(res.ToolCalls[0].Result) != "3" ||
		res.ToolCalls[1].Args.Keyword["verbose"] != true {
		t.Errorf("transcript %+v", res.ToolCalls)
	}
}

// TestEvalToolErrorsAsInProcess: every way a tool call fails raises the
// same exception class (with the same message) remotely as in-process,
// and a client-side budget ends the eval with the same status.
func TestEvalToolErrorsAsInProcess(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{ToolCalls: 3})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	rescue := func(call string) string {
		return `begin; ` + call + `; "no error"; rescue Exception => e; "#{e.class.name}: #{e.message}"; end`
	}
	for _, call := range []string{
		`lookup("missing")`,     // ToolError with a class of its own
		`lookup("boom")`,        // a plain Go error
		`add(1)`,                // arity: ArgumentError from the client's Func
		`add("x", 2)`,           // type: ArgumentError
		`add(13, 1)`,            // BeforeCall veto
		`delete_all`,            // approval (no Approver: denied)
		`Glovebox.call("nope")`, // unknown tool
		`add(2**70, 1)`,         // a Bignum crosses the wire exactly, and does not fit an int
	} {
		code := rescue(call)
		local, err := a.rt.Eval(context.Background(), code)
		if err != nil {
			t.Fatal(err)
		}
		remote, err := ev.Eval(context.Background(), code)
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		t.Logf("%s → %v", call, remote.Value)
		if local.Value != remote.Value || local.Status != remote.Status {
			t.Errorf("%s:\n in-process %v %v\n remote     %v %v", call, local.Status, local.Value, remote.Status, remote.Value)
		}
	}
	code := `add(1,1); add(1,1); add(1,1); add(1,1); :unreached`
	local, _ := a.rt.Eval(context.Background(), code)
	remote, err := ev.Eval(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, local, gb.StatusToolBudgetExceeded)
	wantStatus(t, remote, gb.StatusToolBudgetExceeded)
	if local.Error.Class != remote.Error.Class || local.Error.Message != remote.Error.Message || len(remote.ToolCalls) != 4 {
		t.Errorf("budget:\n in-process %+v\n remote     %+v (%d calls)", local.Error, remote.Error, len(remote.ToolCalls))
	}
}

// TestEvalSessionAcrossEvals: state carries from eval to eval in a remote
// session, tools included; a closed session is gone, and another tenant
// cannot use one.
func TestEvalSessionAcrossEvals(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	ca := p.client(t, p.toks.a)
	s, err := ca.Evaluator(a.rt).NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct{ code, want string }{
		{`total = add(40, 1)`, "41"},
		{`def bump(n) = add(n, 1)`, "bump"},
		{`total = bump(total)`, "42"},
		{`total`, "42"}, // same code as a later eval would be: a fresh key each time
		{`total`, "42"},
	}
	for _, st := range steps {
		res, err := s.Eval(context.Background(), st.code)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.Value) != st.want || res.SessionReset {
			t.Fatalf("%s = %v (%s %+v), want %s", st.code, res.Value, res.Status, res.Error, st.want)
		}
	}
	if a.hits.Load() != 2 {
		t.Errorf("tools ran %d times, want 2", a.hits.Load())
	}
	// Another tenant cannot use or close the session.
	for _, try := range []struct{ method, path, body string }{
		{"POST", "/v1/evals", `{"code":"total","session":"` + s.ID() + `"}`},
		{"DELETE", "/v1/sessions/" + s.ID(), ``},
	} {
		code, body := rawDo(t, p, p.toks.b, try.method, try.path, try.body)
		if !strings.Contains(body, "not_found") || strings.Contains(body, `"eval"`) {
			t.Errorf("tenant b %s %s: %d %q", try.method, try.path, code, body)
		}
	}
	if res, err := s.Eval(context.Background(), `total`); err != nil || res.Value != int64(42) {
		t.Errorf("the session after b's attempts: %v %v", res, err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Eval(context.Background(), `total`)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "not_found" || ce.InDoubt() {
		t.Errorf("eval in a closed session: %v", err)
	}
}

// TestEvalRetryNeverRemakesToolCalls: an eval whose stream broke while
// it ran is in doubt; the retry with its key gets the outcome, and no
// tool call is made twice. A retry of a finished eval is answered from
// the record, transcript included; the same key for other code is
// refused.
func TestEvalRetryNeverRemakesToolCalls(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig.RootCAs = p.pool
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	c, err := client.Dial(context.Background(), client.Config{URL: p.hs.URL, Token: p.toks.a, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	ev := c.Evaluator(a.rt)
	// The second tool call cuts every connection while it runs: its
	// answer goes out on a new one, but the eval's stream is gone.
	cut := func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
	}
	code := `a = add(1, 2); b = add(20, 22); c = add(a, b); sleep 0.2; [a, b, c]`
	var once sync.Once
	hits0 := a.hits.Load()
	go func() {
		for a.hits.Load() < hits0+2 {
			time.Sleep(time.Millisecond)
		}
		once.Do(cut)
	}()
	_, err = ev.Eval(context.Background(), code)
	var ce *client.Error
	if !errors.As(err, &ce) || !ce.InDoubt() || ce.Key == "" {
		t.Fatalf("want an in-doubt error with a key, got %v", err)
	}
	res, err := ev.Retry(context.Background(), code, client.EvalOptions{}, err)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Value) != "[3 42 45]" {
		t.Fatalf("retry: %v %+v", res.Value, res.Error)
	}
	if n := a.hits.Load() - hits0; n != 3 {
		t.Errorf("the tools ran %d times for 3 calls", n)
	}
	if len(res.ToolCalls) != 3 {
		t.Errorf("transcript after retry: %+v", res.ToolCalls)
	}

	// A finished eval: answered from its record, by a fresh Evaluator.
	ev2 := p.client(t, p.toks.a).Evaluator(a.rt)
	again, err := ev2.EvalWith(context.Background(), code, client.EvalOptions{Key: ce.Key})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again.Value) != "[3 42 45]" || a.hits.Load()-hits0 != 3 || len(again.ToolCalls) != 3 || again.ToolCalls[2].Result != int64(45) {
		t.Errorf("from the record: %v, %d tool runs, transcript %+v", again.Value, a.hits.Load()-hits0, again.ToolCalls)
	}
	_, err = ev2.EvalWith(context.Background(), `1`, client.EvalOptions{Key: ce.Key})
	if !errors.As(err, &ce) || ce.Code != "key_conflict" {
		t.Errorf("other code under the key: %v", err)
	}
	// Another tenant does not see the record: the key is free for it.
	evB := p.client(t, p.toks.b).Evaluator(a.rt)
	resB, err := evB.EvalWith(context.Background(), `1 + 1`, client.EvalOptions{Key: ce.Key})
	if err != nil || resB.Value != int64(2) {
		t.Errorf("tenant b with a's key: %v %v", resB, err)
	}
}

// TestEvalCodemodeOffHost: an agent's code tool moves off-host by
// changing the Evaluator; the model sees the same output.
func TestEvalCodemodeOffHost(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	local, err := codemode.New(codemode.Config{Runtime: a.rt})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := codemode.New(codemode.Config{Runtime: a.rt, Evaluator: p.client(t, p.toks.a).Evaluator(a.rt)})
	if err != nil {
		t.Fatal(err)
	}
	code := `puts "sum"; add(2, 3)`
	lo, err := local.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := remote.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if l, r := stripDuration(string(lo.Output)), stripDuration(string(ro.Output)); l != r {
		t.Errorf("model output differs:\n in-process %s\n off-host   %s", l, r)
	}
	if ro.Result.Value != int64(5) || remote.Description() != local.Description() {
		t.Errorf("remote outcome %v", ro.Result.Value)
	}
}

// TestEvalRealProcess: `glovebox executor --evals` as a process on
// loopback, driven by the real client, tools called back.
func TestEvalRealProcess(t *testing.T) {
	s := newProcSetup(t, 1)
	s.extra = []string{"--evals", "--eval-pool", "-1"}
	p := s.start(t)
	a := newApp(t, gb.Limits{})
	ev := s.client(t, "https://"+p.url, s.toks.a).Evaluator(a.rt)
	res, err := ev.EvalWith(context.Background(), `puts "hi"; add(20, 22)`, client.EvalOptions{Stdout: a})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	if res.Value != int64(42) || a.hits.Load() != 1 || res.Stdout != "hi\n" {
		t.Errorf("value %v, %d tool runs, stdout %q", res.Value, a.hits.Load(), res.Stdout)
	}
	if !slices.Equal(a.notes(), []string{"out:hi\n", "tool:add(20,22)"}) {
		t.Errorf("order %q", a.notes())
	}
}

func wantStatus(t testing.TB, res *gb.Result, want gb.Status) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %s, want %s: %+v", res.Status, want, res.Error)
	}
}

// rawDo sends one request with tok and returns the status and body.
func rawDo(t testing.TB, p *inproc, tok, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, p.hs.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := p.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEvalRecordAndCancel: an eval's record says it ran in wasm and is
// the tenant's alone; DELETE cancels a running eval, which ends canceled
// with its record stored.
func TestEvalRecordAndCancel(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	const key = "e-record-test-1"
	res, err := ev.EvalWith(context.Background(), `add(1, 1)`, client.EvalOptions{Key: key})
	if err != nil || res.Value != int64(2) {
		t.Fatal(res, err)
	}
	code, body := rawDo(t, p, p.toks.a, "GET", "/v1/evals/"+key, "")
	if code != 200 || !strings.Contains(body, `"backend":"wasm"`) || !strings.Contains(body, `"value":"2"`) {
		t.Errorf("record: %d %s", code, body)
	}
	if code, body := rawDo(t, p, p.toks.b, "GET", "/v1/evals/"+key, ""); code != 404 || strings.Contains(body, `"value"`) {
		t.Errorf("tenant b reads a's eval: %d %s", code, body)
	}

	hits0 := a.hits.Load()
	type out struct {
		res *gb.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := ev.EvalWith(context.Background(), `add(2, 2); loop { }`, client.EvalOptions{Key: "e-cancel-test-1"})
		done <- out{r, err}
	}()
	for a.hits.Load() == hits0 { // the eval is running once its tool call came back
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := rawDo(t, p, p.toks.a, "DELETE", "/v1/evals/e-cancel-test-1", ""); code != 200 || !strings.Contains(body, `"status":"canceled"`) {
		t.Errorf("DELETE: %d %s", code, body)
	}
	o := <-done
	if o.err != nil || o.res.Status != gb.StatusCanceled {
		t.Errorf("cancelled eval: %+v %v", o.res, o.err)
	}
}

// TestEvalSessionIdlesOut: a session unused past SessionIdle is closed
// by the executor; its next eval is refused with not_found.
func TestEvalSessionIdlesOut(t *testing.T) {
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, SessionIdle: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	a := newApp(t, gb.Limits{})
	s, err := p.client(t, p.toks.a).Evaluator(a.rt).NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(context.Background(), `x = 1`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond) // longer than the idle time: polling does not keep it alive
		_, err := s.Eval(context.Background(), `x`)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == "not_found" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session is still there: %v", err)
		}
	}
}

// TestEvalOutputCapped: the guest's output is cut at the client's
// Limits.Stdout on the executor; what streams back is the kept part only.
func TestEvalOutputCapped(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{Stdout: 4096})
	var streamed atomic.Int64
	w := writerFunc(func(b []byte) (int, error) { streamed.Add(int64(len(b))); return len(b), nil })
	res, err := p.client(t, p.toks.a).Evaluator(a.rt).EvalWith(context.Background(), `print "x" * 5_000_000; 7`, client.EvalOptions{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if res.Value != int64(7) || !res.StdoutTruncated || len(res.Stdout) > 4096+200 || streamed.Load() > 4096 {
		t.Errorf("value %v, truncated %v, kept %d bytes, streamed %d", res.Value, res.StdoutTruncated, len(res.Stdout), streamed.Load())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestEvalToolBytesBounded: the tool-call arguments an eval sends back
// stay in its event log until it ends, so the executor bounds them per
// eval: past MaxToolBytes the eval ends with tool_budget_exceeded.
func TestEvalToolBytesBounded(t *testing.T) {
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, MaxToolBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	res, err := ev.Eval(context.Background(), `s = "x" * 10_000; 20.times { lookup(s) }; :unreached`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusToolBudgetExceeded)
	if n := a.hits.Load(); n < 5 || n > 7 {
		t.Errorf("%d calls reached the client; 64 KiB holds 6 of 10 KB", n)
	}
	if !strings.Contains(res.Error.Message, "65536 bytes of tool arguments") {
		t.Errorf("message %q", res.Error.Message)
	}
}

// TestEvalSessionCap: a tenant opens at most MaxSessions sessions, even
// all at once; closing one frees its place. Another tenant has its own.
func TestEvalSessionCap(t *testing.T) {
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, MaxSessions: 2}); err != nil {
		t.Fatal(err)
	}
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	var (
		mu   sync.Mutex
		open []*client.Session
		full int
	)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ev.NewSession(context.Background())
			mu.Lock()
			defer mu.Unlock()
			var ce *client.Error
			switch {
			case err == nil:
				open = append(open, s)
			case errors.As(err, &ce) && ce.Code == "queue_full" && ce.Status == 429:
				full++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(open) != 2 || full != 4 {
		t.Fatalf("%d opened, %d refused; want 2 and 4", len(open), full)
	}
	if _, err := p.client(t, p.toks.b).Evaluator(a.rt).NewSession(context.Background()); err != nil {
		t.Errorf("tenant b: %v", err)
	}
	open[0].Close(context.Background())
	if _, err := ev.NewSession(context.Background()); err != nil {
		t.Errorf("after a close: %v", err)
	}
}

// TestEvalConcurrentSameKeys: 40 clients at once, 10 keys: every client
// gets its key's answer, and the executor ran exactly 10 evals.
func TestEvalConcurrentSameKeys(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := p.client(t, p.toks.a).Evaluator(a.rt)
			k := i % 10
			res, err := ev.EvalWith(context.Background(), fmt.Sprintf("sleep 0.05; %d * 2", k), client.EvalOptions{Key: fmt.Sprintf("e-same-%d", k)})
			if err != nil || res.Value != int64(k*2) {
				t.Errorf("client %d: %v %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	_, body := rawDo(t, p, p.toks.a, "GET", "/metrics", "")
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `glovebox_executor_runs_total{backend="wasm",kind="eval",status="completed"}`) {
			fmt.Sscan(strings.Fields(line)[1], &n)
		}
	}
	if n != 10 {
		t.Errorf("%d evals ran for 10 keys", n)
	}
}

// TestEvalDisableVMReuse: with EvalConfig.DisableVMReuse no VM behind the
// server's evals is rewound; by default they are.
func TestEvalDisableVMReuse(t *testing.T) {
	for _, off := range []bool{true, false} {
		p := startInproc(t, 1, nil)
		if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, DisableVMReuse: off}); err != nil {
			t.Fatal(err)
		}
		a := newApp(t, gb.Limits{})
		ev := p.client(t, p.toks.a).Evaluator(a.rt)
		before := p.srv.VMsRewound()
		for range 4 {
			res, err := ev.EvalWith(context.Background(), "add(1, 2)", client.EvalOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, res, gb.StatusOK)
		}
		if rewound := p.srv.VMsRewound() - before; off != (rewound == 0) {
			t.Errorf("DisableVMReuse %v: %d VMs rewound", off, rewound)
		}
	}
}

// TestEvalVMsStayWithTenant: by default a VM one tenant's eval ran is
// rewound for that tenant's next eval with the same tools only, never
// for another tenant's (issue 22 A5: what residency tells of the earlier
// eval would cross tenants); with EvalConfig.ShareVMsAcrossTenants the
// other tenant's eval takes it.
func TestEvalVMsStayWithTenant(t *testing.T) {
	for _, share := range []bool{false, true} {
		p := startInproc(t, 1, nil)
		if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, ShareVMsAcrossTenants: share}); err != nil {
			t.Fatal(err)
		}
		a := newApp(t, gb.Limits{})
		evA, evB := p.client(t, p.toks.a).Evaluator(a.rt), p.client(t, p.toks.b).Evaluator(a.rt)
		eval := func(ev *client.Evaluator) uint64 {
			before := p.srv.VMsReused()
			res, err := ev.EvalWith(context.Background(), "add(1, 2)", client.EvalOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, res, gb.StatusOK)
			return p.srv.VMsReused() - before
		}
		eval(evA) // leaves a VM rewound
		if got := eval(evB); share != (got == 1) {
			t.Errorf("ShareVMsAcrossTenants %v: tenant b's first eval took %d VMs tenant a's eval left", share, got)
		}
		if got := eval(evB); got != 1 {
			t.Errorf("ShareVMsAcrossTenants %v: tenant b's second eval took %d rewound VMs, want its own first one's", share, got)
		}
	}
}

// A binary String keeps its bytes and its type through the executor:
// the value crosses the wire as {"$base64": ...} and the client reads
// []byte back, as an in-process eval returns.
func TestEvalBinaryValue(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	res, err := p.client(t, p.toks.a).Evaluator(a.rt).Eval(context.Background(), `["\x89PNG\xff\x00".b, "text"]`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	v, _ := res.Value.([]any)
	if b, ok := v[0].([]byte); !ok || string(b) != "\x89PNG\xff\x00" || v[1] != "text" {
		t.Fatalf("%#v", res.Value)
	}
}

// TestEvalApprovalAfterDeadlineNotRun: the executor's tool_call event
// says how long the call may take (time_left_ms); the client's approver
// answers after that, while the client's own tool channel (twice the
// Timeout) is still open: the tool must not run, and the client's
// transcript says why. Without the event's time the client ran it, after
// the eval had ended on the executor.
func TestEvalApprovalAfterDeadlineNotRun(t *testing.T) {
	p := startEvals(t)
	var runs atomic.Int32
	var ts gb.Toolset
	if err := ts.Add("charge", func(context.Context, gb.Args) (any, error) { runs.Add(1); return "charged", nil }); err != nil {
		t.Fatal(err)
	}
	if err := ts.RequireApproval("charge"); err != nil {
		t.Fatal(err)
	}
	done := make(chan gb.ToolCall, 1)
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, Limits: gb.Limits{Timeout: time.Second}, PoolSize: -1,
		Hooks: gb.Hooks{
			Approver: func(context.Context, string, gb.Args) error {
				time.Sleep(1600 * time.Millisecond) // past the eval's 1 s, within the client's 2 s; ignores its context
				return nil
			},
			AfterCall: func(_ context.Context, c gb.ToolCall) { done <- c },
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	res, err := p.client(t, p.toks.a).Evaluator(rt).Eval(context.Background(), `charge`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusTimeout)
	var c gb.ToolCall
	select {
	case c = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call never finished on the client")
	}
	time.Sleep(time.Second) // the approver's goroutine has returned by now: nothing may follow it
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times after its eval ended", runs.Load())
	}
	if c.Outcome != gb.OutcomeTimeout || !strings.Contains(c.Error, "did not run") {
		t.Fatalf("client transcript %+v", c)
	}
}

// TestEvalEnv: an eval's env is the guest's whole ENV on the executor,
// in-process, in a bwrap worker and in a session; nothing of the
// executor's environment reaches it; a variable glovebox.WithEnv refuses,
// and env with continue, are refused bad_request, naming env.
func TestEvalEnv(t *testing.T) {
	t.Setenv("GLOVEBOX_EXECUTOR_SECRET", "s3cret")
	code := `ENV.to_h.sort.inspect`
	want := `[["LANG", "C"], ["MODE", "batch"]]`
	for name, p := range map[string]*inproc{"in-process": startEvals(t), "worker": startWorkerEvals(t, nil, 0)} {
		a := newApp(t, gb.Limits{})
		ev := p.client(t, p.toks.a).Evaluator(a.rt)
		res, err := ev.EvalWith(context.Background(), code, client.EvalOptions{Env: map[string]string{"MODE": "batch", "LANG": "C"}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantStatus(t, res, gb.StatusOK)
		if res.Value != want {
			t.Errorf("%s: ENV %v, want %s", name, res.Value, want)
		}
		if res, err := ev.Eval(context.Background(), `ENV.to_h.inspect`); err != nil || res.Value != "{}" {
			t.Errorf("%s: ENV without env: %v %+v", name, err, res)
		}
	}
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	s, err := p.client(t, p.toks.a).Evaluator(a.rt).NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.EvalWith(context.Background(), `ENV["MODE"]`, client.EvalOptions{Env: map[string]string{"MODE": "session"}}); err != nil || res.Value != "session" {
		t.Errorf("session: %v %+v", err, res)
	}
	for body, msg := range map[string]string{
		`{"code":"1","env":{"A=B":"1"}}`:                                    `env: environment variable name \"A=B\" holds`,
		`{"code":"1","env":{"A":"x\u0000"}}`:                                `env: the value of environment variable \"A\" holds a NUL byte`,
		`{"continue":{"from":"e-paused-1","approve":true},"env":{"A":"1"}}`: "env: a continued eval keeps the environment",
	} {
		code, got := rawDo(t, p, p.toks.a, "POST", "/v1/evals", body)
		if code != http.StatusBadRequest || !strings.Contains(got, msg) {
			t.Errorf("%s: %d %s, want 400 %q", body, code, got, msg)
		}
	}
}
