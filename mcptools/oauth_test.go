package mcptools_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// loopbackAS is a small authorization server and protected MCP server on
// one loopback address: what no real one here can be (the conformance
// suite's, driven through the CLI, covers the spec's variants). It issues
// a first access token that is already within oauth2's expiry margin, so
// the client must use the refresh token.
type loopbackAS struct {
	srv       *httptest.Server
	mu        sync.Mutex
	challenge string
	grants    []string
	authorize int
}

func newLoopbackAS(t *testing.T) *loopbackAS {
	as := &loopbackAS{}
	mux := http.NewServeMux()
	as.srv = httptest.NewServer(mux)
	t.Cleanup(as.srv.Close)
	base := as.srv.URL
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: base + "/mcp", AuthorizationServers: []string{base}, ScopesSupported: []string{"tools"}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"none"},
			"authorization_response_iss_parameter_supported": true, "scopes_supported": []string{"tools", "offline_access"},
		})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		as.mu.Lock()
		as.authorize++
		as.challenge = q.Get("code_challenge")
		as.mu.Unlock()
		if q.Get("client_id") != "glovebox-test" || q.Get("code_challenge_method") != "S256" || q.Get("resource") != base+"/mcp" {
			http.Error(w, "bad authorization request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		back, _ := url.Parse(q.Get("redirect_uri"))
		v := url.Values{"code": {"code-1"}, "state": {q.Get("state")}, "iss": {base}}
		back.RawQuery = v.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		g := r.PostForm.Get("grant_type")
		as.mu.Lock()
		as.grants = append(as.grants, g)
		challenge := as.challenge
		as.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case g == "authorization_code" && r.PostForm.Get("code") == "code-1" && pkce(r.PostForm.Get("code_verifier")) == challenge:
			json.NewEncoder(w).Encode(map[string]any{"access_token": "at-1-SECRET", "token_type": "Bearer", "expires_in": 5, "refresh_token": "rt-SECRET", "scope": "tools offline_access"})
		case g == "refresh_token" && r.PostForm.Get("refresh_token") == "rt-SECRET":
			json.NewEncoder(w).Encode(map[string]any{"access_token": "at-2-SECRET", "token_type": "Bearer", "expires_in": 3600, "scope": "tools offline_access"})
		default:
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"error": "invalid_grant"})
		}
	})
	s := mcp.NewServer(&mcp.Implementation{Name: "guarded", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "which_token", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(req.Extra.TokenInfo.UserID), nil
		})
	verify := func(ctx context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		if tok == "at-1-SECRET" || tok == "at-2-SECRET" {
			return &auth.TokenInfo{UserID: tok[:4], Scopes: []string{"tools"}, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp"})(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})))
	return as
}

func pkce(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// The whole flow with the loopback redirect: the 401 leads to the
// metadata, the user "opens" the authorization URL (a GET that follows
// the redirect to glovebox's loopback listener), the code is exchanged
// with PKCE, and the too-short-lived token is refreshed, not authorized
// again. No token reaches the guest, a result or the log.
func TestOAuthLoopbackFlowAndRefresh(t *testing.T) {
	as := newLoopbackAS(t)
	var log syncBuf
	cfg := mcptools.Config{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	opened := 0
	open := func(ctx context.Context, authURL string) error {
		opened++
		req, _ := http.NewRequestWithContext(ctx, "GET", authURL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// Authorized, the stateless server is bound at 2026-07-28.
	set := bindAt(t, context.Background(), cfg, mcptools.Server{Name: "g", URL: as.srv.URL + "/mcp",
		OAuth: &mcptools.OAuth{ClientID: "glovebox-test", Open: open}}, "2026-07-28")
	rt := runtime(t, set, glovebox.Limits{})
	res := eval(t, rt, `[which_token["text"], which_token["text"]]`)
	got := fmtAny(wantOK(t, res))
	as.mu.Lock()
	grants, authorize := strings.Join(as.grants, ","), as.authorize
	as.mu.Unlock()
	if got != "at-2,at-2" || authorize != 1 || opened != 1 || !strings.HasPrefix(grants, "authorization_code,refresh_token") {
		t.Fatalf("calls saw %s; %d authorizations, %d opened, grants %s", got, authorize, opened, grants)
	}
	dump, _ := json.Marshal(res)
	if strings.Contains(string(dump)+log.String(), "SECRET") {
		t.Fatalf("a token leaked:\n%s\n%s", dump, log.String())
	}
}
