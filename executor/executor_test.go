package executor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestRunStreamsAsWritten: the first line reaches the client while the
// command is still blocked (it waits for the host counter, which the test
// releases only after seeing that line), and both streams keep their order.
func TestRunStreamsAsWritten(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	cnt := newCounter(t)
	gate := http.NewServeMux()
	gate.HandleFunc("/gate", func(w http.ResponseWriter, r *http.Request) { <-release; io.WriteString(w, "go") })
	cnt.srv.Config.Handler = gate
	p := startInproc(t, cnt.port, nil)
	b := remote.New(p.client(t, p.toks.a), nil)
	if err := box.RequireOffHost(b); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out, errs bytes.Buffer
	shell := `for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; echo first-line-done
python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:PORT/gate').read()"
for i in 6 7 8 9; do echo out$i; echo err$i >&2; done`
	shell = strings.ReplaceAll(shell, "PORT", fmt.Sprint(cnt.port))
	res, err := b.Run(context.Background(), box.Command{Shell: shell, Network: box.Network{Allow: []string{"127.0.0.1"}},
		Stream: func(stream int, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			if stream == 1 {
				out.Write(p)
				if strings.Contains(out.String(), "first-line-done") {
					once.Do(func() { close(release) })
				}
			} else {
				errs.Write(p)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != out.String() || res.Stderr != errs.String() {
		t.Errorf("streamed %q/%q, result %q/%q", out.String(), errs.String(), res.Stdout, res.Stderr)
	}
	want := "out1\nout2\nout3\nout4\nout5\nfirst-line-done\nout6\nout7\nout8\nout9\n"
	if res.Stdout != want || !strings.HasPrefix(res.Stderr, "err1\nerr2\nerr3\nerr4\nerr5\nerr6") {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if res.Trust != box.TrustRemote || !res.OffHost() || res.Isolation != box.IsolationNamespaces {
		t.Errorf("posture %+v", res.Posture)
	}
}

// TestLargeOutputCapped: 5 MB written, Limits.Output kept, in the stream
// and the result alike; an outputs file is readable after the run.
func TestLargeOutputCapped(t *testing.T) {
	p := startInproc(t, 1, nil)
	c := p.client(t, p.toks.a)
	var streamed int
	cmd := box.Command{Shell: `head -c 5000000 /dev/zero | tr '\0' x; mkdir -p outputs; echo report > outputs/r.txt`, Limits: box.Limits{Output: 64 << 10}}
	res, err := remote.New(c, client.Key).Run(context.Background(), box.Command{Shell: cmd.Shell, Limits: cmd.Limits,
		Stream: func(_ int, p []byte) { streamed += len(p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 64<<10 || !res.StdoutTruncated || streamed > 64<<10 || res.ExitStatus != 0 {
		t.Errorf("stdout %d bytes truncated=%v streamed %d exit %d", len(res.Stdout), res.StdoutTruncated, streamed, res.ExitStatus)
	}
	data, err := c.Output(context.Background(), client.Key(&cmd), "r.txt")
	if err != nil || string(data) != "report\n" {
		t.Errorf("output %q %v", data, err)
	}
}

// TestConcurrentClientsSameKeys: 200 clients, 50 keys → 50 executions
// (the host counter), each key's callers all get that run's output.
func TestConcurrentClientsSameKeys(t *testing.T) {
	cnt := newCounter(t)
	p := startInproc(t, cnt.port, nil)
	c := p.client(t, p.toks.a)
	var wg sync.WaitGroup
	results := make([]string, 200)
	errs := make([]error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % 50
			res, err := c.Run(context.Background(), remote.Request{IdempotencyKey: fmt.Sprintf("k%d", k),
				Command: box.Command{Shell: cnt.hitShell(fmt.Sprint(k)) + fmt.Sprintf(" && echo run-%d-$$", k),
					Network: box.Network{Allow: []string{"127.0.0.1"}}}})
			if err == nil {
				results[i] = res.Stdout
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if results[i] != results[i%50] || !strings.HasPrefix(results[i], fmt.Sprintf("run-%d-", i%50)) {
			t.Errorf("client %d got %q, key's first caller %q", i, results[i], results[i%50])
		}
	}
	if n := cnt.n.Load(); n != 50 {
		t.Errorf("%d executions, want 50", n)
	}
}

// TestKeyConflictAndTenants: the same key with another command is
// key_conflict; another tenant's key is not_found (it reads nothing) and
// its own run under the same key is a separate one.
func TestKeyConflictAndTenants(t *testing.T) {
	p := startInproc(t, 1, nil)
	ca, cb := p.client(t, p.toks.a), p.client(t, p.toks.b)
	ctx := context.Background()
	if _, err := ca.Run(ctx, remote.Request{IdempotencyKey: "same", Command: box.Command{Shell: "echo a-secret-result"}}); err != nil {
		t.Fatal(err)
	}
	_, err := ca.Run(ctx, remote.Request{IdempotencyKey: "same", Command: box.Command{Shell: "echo other"}})
	wantCode(t, err, "key_conflict", 409)
	_, _, err = cb.State(ctx, "same")
	wantCode(t, err, "not_found", 404)
	res, err := cb.Run(ctx, remote.Request{IdempotencyKey: "same", Command: box.Command{Shell: "echo b"}})
	if err != nil || res.Stdout != "b\n" {
		t.Fatalf("tenant b's own run: %v %v", res, err)
	}
	if st, _, err := ca.State(ctx, "same"); err != nil || st != "completed" {
		t.Errorf("tenant a's record: %s %v", st, err)
	}
}

func wantCode(t *testing.T, err error, code string, status int) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != code || ce.Status != status || ce.InDoubt() {
		t.Errorf("want %s (%d), got %v", code, status, err)
	}
}

// TestAuthRefusals: each refusal has its documented code and status.
func TestAuthRefusals(t *testing.T) {
	p := startInproc(t, 1, nil)
	hc := p.hs.Client()
	post := func(tok, body string) (int, string) {
		req, _ := http.NewRequest("POST", p.hs.URL+"/v1/runs", strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ok := `{"command":{"argv":["true"]}}`
	for _, tc := range []struct {
		name, tok, body string
		status          int
		code            string
	}{
		{"no token", "", ok, 401, "unauthenticated"},
		{"wrong token", "gbx_" + strings.Repeat("A", 43), ok, 401, "unauthenticated"},
		{"oversized", p.toks.a, `{"command":{"argv":["true"],"stdin":"` + strings.Repeat("A", 2<<20) + `"}}`, 413, "request_too_large"},
		{"expired", p.toks.a, `{"expires_at":"2020-01-01T00:00:00Z","command":{"argv":["true"]}}`, 408, "expired"},
		{"unknown field", p.toks.a, `{"command":{"argv":["true"]},"x":1}`, 400, "bad_request"},
		{"bad key", p.toks.a, `{"idempotency_key":"a b","command":{"argv":["true"]}}`, 400, "bad_request"},
		{"invalid command", p.toks.a, `{"command":{}}`, 422, "invalid_command"},
	} {
		status, body := post(tc.tok, tc.body)
		if status != tc.status || !strings.Contains(body, `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
	}
	_, err := client.Dial(context.Background(), client.Config{URL: p.hs.URL, Token: "wrong", RootCAs: p.pool})
	wantCode(t, err, "unauthenticated", 401)
}

// TestOversizedRefusedBeforeTheBody: a request whose Content-Length is
// over the tenant's max_request_bytes is refused (413,
// request_too_large) before its body is read, so a client that sent
// Expect: 100-continue reads the refusal instead of sending megabytes
// into a connection the executor closes (the Ruby gem's 20 MB eval
// ended in doubt that way).
func TestOversizedRefusedBeforeTheBody(t *testing.T) {
	p := startInproc(t, 1, nil)
	u, _ := url.Parse(p.hs.URL)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: p.pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", u.Host, p.toks.a, 64<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"code":"request_too_large"`) {
		t.Fatalf("got %d %s, want 413 request_too_large before the body", resp.StatusCode, b)
	}
}

// TestCredentialsNeverKept: a credential reaches the command and appears
// in no log line, store file, result or error.
func TestCredentialsNeverKept(t *testing.T) {
	p := startInproc(t, 1, nil)
	b := remote.New(p.client(t, p.toks.a), nil)
	const canary = "canary-7f3e9a1c55d2"
	cred := map[string]func(context.Context) (string, error){"TOK": func(context.Context) (string, error) { return canary, nil }}
	res, err := b.Run(context.Background(), box.Command{Shell: `test "$TOK" = ` + canary + ` && echo match`, Credentials: cred})
	if err != nil || res.Stdout != "match\n" {
		t.Fatalf("%v %v", res, err)
	}
	_, err = b.Run(context.Background(), box.Command{Argv: []string{"true"}, Credentials: cred, Files: map[string][]byte{"big": bytes.Repeat([]byte("x"), 2<<20)}})
	if err == nil || strings.Contains(err.Error(), canary) {
		t.Errorf("oversized run: %v", err)
	}
	p.srv.Close()
	files, _ := filepath.Glob(filepath.Join(p.dir, "store.db*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if bytes.Contains(data, []byte(canary)) {
			t.Errorf("%s holds the credential", f)
		}
	}
	if strings.Contains(p.logs.String(), canary) || strings.Contains(fmt.Sprint(res), canary) {
		t.Errorf("the credential leaked: logs %q", p.logs.String())
	}
}

// TestInDoubtAndRefused: the connection breaks after the run started →
// InDoubt, and a deliberate retry with the key gets the one run's result;
// a refused connection is not in doubt.
func TestInDoubtAndRefused(t *testing.T) {
	cnt := newCounter(t)
	p := startInproc(t, cnt.port, nil)
	px := newProxy(t, strings.TrimPrefix(p.hs.URL, "https://"))
	c, err := client.Dial(context.Background(), client.Config{URL: "https://" + px.addr(), Token: p.toks.a, RootCAs: p.pool})
	if err != nil {
		t.Fatal(err)
	}
	cmd := box.Command{Shell: cnt.hitShell("doubt") + "; sleep 1; echo finished", Network: box.Network{Allow: []string{"127.0.0.1"}}}
	done := make(chan error, 1)
	go func() { _, err := c.Run(context.Background(), remote.Request{Command: cmd}); done <- err }()
	waitFor(t, func() bool { return cnt.n.Load() == 1 })
	px.breakConns()
	err = <-done
	var ce *client.Error
	if !errors.As(err, &ce) || !ce.InDoubt() || !errors.Is(err, remote.ErrInDoubt) || !strings.HasPrefix(ce.Key, "r-") {
		t.Fatalf("want in doubt, got %v", err)
	}
	res, err := p.client(t, p.toks.a).Run(context.Background(), remote.Request{Command: cmd, IdempotencyKey: ce.Key})
	if err != nil || res.Stdout != "finished\n" || cnt.n.Load() != 1 {
		t.Fatalf("retry: %v %v, %d runs", res, err, cnt.n.Load())
	}
	px.close()
	_, err = c.Run(context.Background(), remote.Request{Command: box.Command{Argv: []string{"true"}}})
	if !errors.As(err, &ce) || ce.InDoubt() || errors.Is(err, remote.ErrInDoubt) {
		t.Fatalf("connection refused: want not in doubt, got %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 60 s")
		}
	}
}

// proxy forwards TCP to the executor and can cut every connection.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, c, s)
			px.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(px.close)
	return px
}

func (px *proxy) addr() string { return px.ln.Addr().String() }

func (px *proxy) breakConns() {
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, c := range px.conns {
		c.Close()
	}
	px.conns = nil
}

func (px *proxy) close() { px.ln.Close(); px.breakConns() }

// TestBearerSchemeCase: the scheme name is case-insensitive (RFC 9110
// section 11.1), other schemes and a bare token are refused.
func TestBearerSchemeCase(t *testing.T) {
	p := startInproc(t, 1, nil)
	hc := p.hs.Client()
	for _, tc := range []struct {
		hdr    string
		status int
	}{
		{"bearer " + p.toks.a, 200},
		{"BEARER " + p.toks.a, 200},
		{"Basic " + p.toks.a, 401},
		{p.toks.a, 401},
		{"Bearer ", 401},
	} {
		req, _ := http.NewRequest("POST", p.hs.URL+"/v1/runs", strings.NewReader(`{"command":{"argv":["true"]}}`))
		req.Header.Set("Authorization", tc.hdr)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("Authorization %.12q…: HTTP %d, want %d", tc.hdr, resp.StatusCode, tc.status)
		}
	}
}
