package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// tokens are the bearer tokens the protected server accepts, by user.
var tokens = map[string]string{"alice": "tok-alice-SECRET-1", "bob": "tok-bob-SECRET-2"}

// protected starts a go-sdk server over Streamable HTTP, stateless (so it
// serves 2026-07-28 as well as the older revisions), that wants a bearer
// token: whoami answers with the token's user, echo with the
// arguments it got.
func protected(t *testing.T) string {
	s := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(req.Extra.TokenInfo.UserID), nil
		})
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"verbose":{"type":"boolean"},"n":{"type":["integer","null"]}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(string(req.Params.Arguments)), nil
		})
	verify := func(ctx context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		for u, want := range tokens {
			if tok == want {
				return &auth.TokenInfo{UserID: u, Expiration: time.Now().Add(time.Hour)}, nil
			}
		}
		return nil, auth.ErrInvalidToken
	}
	h := auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// bindAt binds s with cfg (Bind's context ctx) into a new Toolset and
// checks the revision it speaks; the binding is closed when t ends.
func bindAt(t *testing.T, ctx context.Context, cfg mcptools.Config, s mcptools.Server, want string) *glovebox.Toolset {
	t.Helper()
	var set glovebox.Toolset
	b, err := mcptools.Bind(ctx, &set, cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if v := b.ProtocolVersions()[s.Name]; v != want {
		t.Fatalf("%s spoke %q, want %q", s.Name, v, want)
	}
	return &set
}

// At 2026-07-28 (no MCP session) one binding serves every user: the
// host's TokenSource picks each request's token from the eval's context.
// A refused token fails that call only (MCPTransportError, the
// connection stays up for the others). The tokens reach neither the
// guest, the results, the errors nor the log.
func TestTokenSourcePerUser(t *testing.T) {
	url := protected(t)
	var log syncBuf
	cfg := mcptools.Config{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ts := func(ctx context.Context, serverURL string) (*oauth2.Token, error) {
		if serverURL != url {
			return nil, errors.New("wrong server " + serverURL)
		}
		u, _ := ctx.Value(userKey{}).(string)
		if tok, ok := tokens[u]; ok {
			return &oauth2.Token{AccessToken: tok}, nil
		}
		return &oauth2.Token{AccessToken: "tok-nobody-SECRET-3"}, nil
	}
	set := bindAt(t, context.WithValue(context.Background(), userKey{}, "alice"), cfg, mcptools.Server{Name: "p", URL: url, TokenSource: ts}, "2026-07-28")
	rt := runtime(t, set, glovebox.Limits{})
	var out strings.Builder
	for _, u := range []string{"bob", "carol", "alice"} {
		res, err := rt.Eval(context.WithValue(context.Background(), userKey{}, u),
			`begin; whoami["text"]; rescue Glovebox::ToolError => e; "#{e.class}: #{e.message}"; end`)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := res.Value.(string)
		out.WriteString(got + "\n" + res.Stdout + res.Stderr)
		if u != "carol" && got != u {
			t.Errorf("%s's call answered %q", u, got)
		}
		if u == "carol" && (!strings.HasPrefix(got, "Glovebox::MCPTransportError") || !strings.Contains(got, "refused the host's token")) {
			t.Errorf("a refused token: %q, want MCPTransportError", got)
		}
	}
	if strings.Contains(log.String(), "restarting") {
		t.Errorf("a refused token broke the connection every user shares:\n%s", log.String())
	}
	if strings.Contains(out.String()+log.String(), "SECRET") {
		t.Fatalf("a token leaked:\n%s\n%s", out.String(), log.String())
	}
}

// Under 2025-11-25 the binding speaks the revision it is told to, and the
// guest's nil for an optional argument whose type excludes null is left
// out (Ruby's "not given"); where the type allows null it is sent.
func TestProtocolVersionAndNilArguments(t *testing.T) {
	url := protected(t)
	var set glovebox.Toolset
	b := bind(t, &set, mcptools.Server{Name: "p", URL: url, ProtocolVersion: "2025-11-25",
		TokenSource: mcptools.FromOAuth2(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tokens["bob"]}))})
	if v := b.ProtocolVersions()["p"]; v != "2025-11-25" {
		t.Fatalf("spoke %q, want 2025-11-25", v)
	}
	rt := runtime(t, &set, glovebox.Limits{})
	if got := wantOK(t, eval(t, rt, `[whoami["text"], echo(verbose: nil, n: nil)["text"]]`)); fmtAny(got) != `bob,{"n":null}` {
		t.Fatalf("got %s", fmtAny(got))
	}
	var none glovebox.Toolset
	_, err := mcptools.Bind(context.Background(), &none, mcptools.Config{}, mcptools.Server{Name: "p", URL: url, ProtocolVersion: "2099-01-01"})
	if !errors.Is(err, mcptools.ErrBind) || !strings.Contains(err.Error(), "ProtocolVersion") {
		t.Fatalf("an unknown revision: %v", err)
	}
}

// At 2026-07-28 a server asks its questions as an input_required result;
// the binding answers them (the elicitation through Config.Elicit, which
// gets the eval's context, the roots as configured; sampling refused, no
// sampler being offered) and retries with the answers and requestState.
func TestInputRequired(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "confirm", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p := req.Params
			if len(p.InputResponses) == 0 {
				return &mcp.CallToolResult{RequestState: "state-1", InputRequests: mcp.InputRequestMap{
					"ok":    &mcp.ElicitParams{Message: "Go ahead?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"yes":{"type":"boolean"}}}`)},
					"roots": &mcp.ListRootsParams{},
				}}, nil
			}
			el, _ := p.InputResponses["ok"].(*mcp.ElicitResult)
			roots, _ := p.InputResponses["roots"].(*mcp.ListRootsResult)
			if el == nil || roots == nil || len(roots.Roots) != 1 {
				return nil, errors.New("answers missing")
			}
			return text(el.Action + " " + roots.Roots[0].URI + " " + p.RequestState), nil
		})
	s.AddTool(&mcp.Tool{Name: "sample", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if len(req.Params.InputResponses) == 0 {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"m": &mcp.CreateMessageParams{MaxTokens: 5,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}}}}, nil
			}
			return text("sampled"), nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close) // after the binding's Close (cleanups run last first)
	var asked []string
	cfg := mcptools.Config{
		Roots: []mcptools.Root{{URI: "file:///srv/data", Name: "data"}},
		Elicit: func(ctx context.Context, server string, req *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			u, _ := ctx.Value(userKey{}).(string)
			asked = append(asked, server+":"+u+":"+req.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"yes": true}}, nil
		},
	}
	rt := runtime(t, bindAt(t, context.Background(), cfg, mcptools.Server{Name: "asker", URL: srv.URL}, "2026-07-28"), glovebox.Limits{})
	res, err := rt.Eval(context.WithValue(context.Background(), userKey{}, "ada"),
		`[confirm["text"], (begin; sample["text"]; rescue Glovebox::ToolError => e; e.class.name + ": " + e.message; end)]`)
	if err != nil {
		t.Fatal(err)
	}
	got := fmtAny(wantOK(t, res))
	if !strings.HasPrefix(got, "accept file:///srv/data state-1,Glovebox::MCP") || !strings.Contains(got, "does not answer") {
		t.Fatalf("got %s", got)
	}
	if strings.Join(asked, ";") != "asker:ada:Go ahead?" {
		t.Fatalf("asked %v", asked)
	}
	t.Log(got)
}

// Bind refuses authorization settings that contradict each other, before
// starting anything.
func TestAuthSettingsRefused(t *testing.T) {
	ts := mcptools.FromOAuth2(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "x"}))
	for _, s := range []mcptools.Server{
		{Name: "a", Command: []string{"true"}, OAuth: &mcptools.OAuth{}},
		{Name: "a", URL: "http://127.0.0.1:1/mcp", OAuth: &mcptools.OAuth{}, TokenSource: ts},
		{Name: "a", URL: "http://127.0.0.1:1/mcp", TokenSource: ts, Header: http.Header{"Authorization": {"Bearer y"}}},
		{Name: "a", URL: "http://127.0.0.1:1/mcp", OAuth: &mcptools.OAuth{RedirectURL: "https://app.example/cb"}},
	} {
		var set glovebox.Toolset
		if _, err := mcptools.Bind(context.Background(), &set, mcptools.Config{StartTimeout: 5 * time.Second}, s); !errors.Is(err, mcptools.ErrBind) {
			t.Errorf("%+v: %v", s, err)
		} else {
			t.Log(err)
		}
	}
}

// Under 2025-11-25 a server's elicitation is a request of its own, not
// part of the call; with one call under way it is that call's question,
// and Config.Elicit sees the eval's context values (what a host needs to
// ask the right person, or to pass the question on to its own client).
func TestElicitationGetsTheCallsContext(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
			if err != nil {
				return nil, err
			}
			return text(r.Content["name"].(string)), nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close) // after the binding's Close (cleanups run last first)
	cfg := mcptools.Config{Elicit: func(ctx context.Context, server string, req *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		u, _ := ctx.Value(userKey{}).(string)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "asked " + u}}, nil
	}}
	rt := runtime(t, bindAt(t, context.Background(), cfg, mcptools.Server{Name: "asker", URL: srv.URL}, "2025-11-25"), glovebox.Limits{})
	res, err := rt.Eval(context.WithValue(context.Background(), userKey{}, "ada"), `ask["text"]`)
	if err != nil {
		t.Fatal(err)
	}
	if got := wantOK(t, res); got != "asked ada" {
		t.Fatalf("got %v", got)
	}
}

// TestCredentialsStayWithTheServer: the headers and the TokenSource's
// token of a server go to its own origin only: a server that redirects
// its endpoint to another origin does not hand that origin the
// credentials (net/http drops Authorization on such a redirect; the
// binding's transports must not add it back).
func TestCredentialsStayWithTheServer(t *testing.T) {
	seen := make(chan string, 16)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + "|" + r.Header.Get("X-Api-Key")
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer other.Close()
	// Another origin: the same address under another host name.
	to := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/mcp"
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	for _, srv := range []mcptools.Server{
		{Name: "static", URL: redirect.URL + "/mcp", Header: http.Header{"Authorization": {"Bearer tok-STATIC-SECRET"}, "X-Api-Key": {"KEY-SECRET"}}},
		{Name: "user", URL: redirect.URL + "/mcp", TokenSource: func(context.Context, string) (*oauth2.Token, error) {
			return &oauth2.Token{AccessToken: "tok-USER-SECRET", TokenType: "Bearer"}, nil
		}},
	} {
		var ts glovebox.Toolset
		b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{}, srv)
		if err == nil {
			b.Close()
		}
		for drained := false; !drained; {
			select {
			case h := <-seen:
				if strings.Contains(h, "SECRET") {
					t.Errorf("%s: the other origin got %q", srv.Name, h)
				}
			default:
				drained = true
			}
		}
	}
}
