package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/gloveboxhq/glovebox/internal/netguard"
)

var _ auth.OAuthHandler = (*oauthState)(nil)

// TokenSource is the host's own source of bearer tokens for an HTTP
// server (see [Server].TokenSource): it returns the access token to send
// to serverURL (the Server's URL) with the request whose context is ctx.
// A tool call's requests carry the context the host passed to Eval (its
// values reach here: a user's key, say); the requests that open or resume
// the connection carry Bind's context or that of the call that restarted
// the server. It is called before every HTTP request, so it should cache
// (an [oauth2.ReuseTokenSource] does). An error fails the request: the
// guest's call raises MCPTransportError with the error's text, so the
// error must not hold the token. A nil or empty token sends no
// Authorization header.
type TokenSource func(ctx context.Context, serverURL string) (*oauth2.Token, error)

// FromOAuth2 adapts an [oauth2.TokenSource] (one user's, refreshed by the
// oauth2 package) to a [TokenSource] that ignores the context and URL.
func FromOAuth2(ts oauth2.TokenSource) TokenSource {
	return func(context.Context, string) (*oauth2.Token, error) { return ts.Token() }
}

// OAuth configures the OAuth 2.1 authorization of one HTTP server as the
// MCP authorization specification describes it (see [Server].OAuth),
// built on the Go SDK's auth package: when the server answers 401, the
// client finds its protected resource metadata (RFC 9728: from the
// WWW-Authenticate header's resource_metadata, else the well-known
// paths), then the authorization server's metadata (RFC 8414 or OpenID
// discovery, its issuer checked against the one named), and runs the
// authorization code flow with PKCE (S256) and the resource parameter
// (RFC 8707), checking the redirect's iss (RFC 9207). It asks for the
// scopes the 401 or the metadata name (and offline_access when the
// authorization server offers it, for a refresh token). A 403 with
// error="insufficient_scope" asks again with the union of the scopes
// granted and those the challenge names. Tokens are refreshed with the
// refresh token when they expire (golang.org/x/oauth2).
//
// The tokens live in the host process's memory for the Binding's life,
// across restarts of the server, and go only into the Authorization
// header of requests to the server and the token requests to its
// authorization server: never to the guest, a result, an error message
// or a log. Nothing is written to disk; a new Binding logs in again.
//
// The client is identified, in this order of preference, by its client ID
// metadata document (ClientMetadataURL, when the authorization server
// supports them), by a pre-registered client (ClientID), or by dynamic
// client registration (RFC 7591) when the authorization server offers
// it; with none of these the authorization fails.
type OAuth struct {
	// ClientID and ClientSecret are a client registered beforehand with
	// the authorization server. ClientSecret "" is a public client
	// (token_endpoint_auth_method none); with a secret, the client
	// authenticates as the authorization server prefers
	// (client_secret_basic or client_secret_post).
	ClientID     string
	ClientSecret string
	// ClientMetadataURL is the https URL of the client's client ID
	// metadata document, used as its client_id where the authorization
	// server supports them. "" skips that way.
	ClientMetadataURL string
	// RedirectURL is where the authorization server sends the browser
	// back with the code. "" listens on an ephemeral loopback port,
	// http://127.0.0.1:PORT/callback, from Bind to Close. A loopback
	// http URL with a port (for a pre-registered client's fixed redirect)
	// is listened on the same way. Any other URL needs Fetch.
	RedirectURL string
	// Open sends the user to the authorization URL (a browser, a message);
	// the flow then waits, within the request's context, for the
	// redirect to the loopback listener. Nil logs the URL at level Warn
	// on Config.Logger, for the user to open. Open is not used with
	// Fetch.
	Open func(ctx context.Context, authURL string) error
	// Fetch replaces Open and the loopback listener entirely: it sends the
	// user to the URL and returns the code, state and iss of the
	// redirect (a host with a web callback of its own). Nil uses Open.
	Fetch auth.AuthorizationCodeFetcher
	// HTTPClient makes the metadata, registration and token requests,
	// as it is (its own dialing, proxy and redirect policy). Nil uses the
	// client of [oauthClient]: it dials public addresses (those
	// code.dny.dev/ssrf allows, on any port) and the addresses the
	// server's own host resolves to, nothing else (no other loopback,
	// private, link-local or metadata address, which a hostile server
	// could name in its WWW-Authenticate or metadata), uses no proxy, and
	// follows redirects within one origin only.
	HTTPClient *http.Client
}

// oauthState is one server's authorization: the SDK handler (holding the
// tokens) and the loopback listener, kept across restarts.
type oauthState struct {
	handler *auth.AuthorizationCodeHandler
	ln      net.Listener
	srv     *http.Server

	mu      sync.Mutex
	waiting map[string]chan auth.AuthorizationResult // state → waiter
	// refused are the OAuth requests oauthClient refused during the
	// current Authorize: the SDK passes over a metadata document it
	// cannot fetch, so the flow is stopped, saying why, before the user
	// is sent anywhere.
	refused []string
}

// TokenSource is the SDK handler's.
func (st *oauthState) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	return st.handler.TokenSource(ctx)
}

// Authorize runs the SDK handler's flow; its error names the requests
// the OAuth client refused meanwhile.
func (st *oauthState) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	st.mu.Lock()
	st.refused = nil
	st.mu.Unlock()
	err := st.handler.Authorize(ctx, req, resp)
	if err != nil {
		if why := st.refusals(); why != "" && !strings.Contains(err.Error(), why) {
			err = fmt.Errorf("%w (%s)", err, why)
		}
	}
	return err
}

// refuse records a refused OAuth request.
func (st *oauthState) refuse(why string) {
	st.mu.Lock()
	if !slices.Contains(st.refused, why) {
		st.refused = append(st.refused, why)
	}
	st.mu.Unlock()
}

// refusals joins the refused requests of the current flow, "" for none.
func (st *oauthState) refusals() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return strings.Join(st.refused, "; ")
}

// newOAuthState builds the handler for s, listening for the redirect
// when the flow needs a loopback listener.
func newOAuthState(s Server, cfg *Config) (*oauthState, error) {
	o := s.OAuth
	st := &oauthState{waiting: map[string]chan auth.AuthorizationResult{}}
	redirect := o.RedirectURL
	fetch := o.Fetch
	if fetch == nil {
		addr, path := "127.0.0.1:0", "/callback"
		if redirect != "" {
			u, err := url.Parse(redirect)
			if err != nil || u.Scheme != "http" || !loopbackHost(u.Hostname()) || u.Port() == "" {
				return nil, fmt.Errorf("OAuth.RedirectURL %q: want a loopback http URL with a port (http://127.0.0.1:PORT/PATH), or set OAuth.Fetch", redirect)
			}
			addr, path = u.Host, u.Path
			if path == "" {
				path = "/"
			}
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("OAuth: cannot listen for the redirect: %v", err)
		}
		if redirect == "" {
			redirect = "http://" + ln.Addr().String() + path
		}
		mux := http.NewServeMux()
		mux.HandleFunc(path, st.callback)
		st.ln = ln
		st.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go st.srv.Serve(ln)
		open := o.Open
		if open == nil {
			name := s.Name
			open = func(_ context.Context, u string) error {
				cfg.Logger.Warn("mcptools: open this URL to authorize glovebox", "server", name, "url", u)
				return nil
			}
		}
		fetch = func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return st.fetch(ctx, a.URL, open)
		}
	}
	userFetch := fetch
	fetch = func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		if why := st.refusals(); why != "" {
			return nil, errors.New(why)
		}
		return userFetch(ctx, a)
	}
	client := o.HTTPClient
	if client == nil {
		name := s.Name
		client = oauthClient(s.URL, func(why string) {
			cfg.Logger.Warn("mcptools: OAuth request refused", "server", name, "why", why)
			st.refuse(why)
		})
	}
	hc := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: fetch,
		RequestRefreshToken:      true,
		Client:                   client,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{
				ClientName:   "glovebox",
				RedirectURIs: []string{redirect},
				GrantTypes:   []string{"authorization_code", "refresh_token"},
			},
		},
	}
	if o.ClientMetadataURL != "" {
		hc.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: o.ClientMetadataURL}
	}
	if o.ClientID != "" {
		cc := &oauthex.ClientCredentials{ClientID: o.ClientID}
		if o.ClientSecret != "" {
			cc.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: o.ClientSecret}
		}
		hc.PreregisteredClient = cc
	}
	h, err := auth.NewAuthorizationCodeHandler(hc)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("OAuth: %v", err)
	}
	st.handler = h
	return st, nil
}

// oauthClient is the HTTP client of the OAuth requests (metadata
// discovery, registration, tokens) for the server at serverURL: the
// server names their URLs (WWW-Authenticate resource_metadata, its
// metadata's authorization_servers, the authorization server's
// endpoints), so a hostile one could make the host fetch its internal
// services. It dials an address only when code.dny.dev/ssrf finds it
// public (any port) or it is one of those serverURL's host resolves to
// at the time of the dial (a server on loopback or a private network
// may keep its authorization server on the same host); the check is on
// the address the socket connects to, so a name that resolves elsewhere
// later is checked too. It uses no proxy (the check would see only the
// proxy's address) and refuses a redirect to another origin. Refusals
// are errors naming the address or the redirect, also passed to refused.
func oauthClient(serverURL string, refused func(why string)) *http.Client {
	var host string
	if u, err := url.Parse(serverURL); err == nil {
		host = u.Hostname()
	}
	guard := ssrf.New(ssrf.WithAnyPort())
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		ControlContext: func(ctx context.Context, network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("mcptools: OAuth request refused: cannot read the address %q: %v", address, err)
			}
			if oauthAddrAllowed(ctx, guard, host, ap.Addr(), netguard.OwnAddrs()) {
				return nil
			}
			err = fmt.Errorf("mcptools: OAuth request refused: %s is not a public address of another host, nor one of the bound server's host %q; a server's OAuth metadata may name only public hosts or its own (set OAuth.HTTPClient for another policy)", ap.Addr(), host)
			refused(err.Error())
			return err
		}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialContext
	return &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("mcptools: OAuth request to %s: stopped after 10 redirects", via[0].URL.Redacted())
		}
		if !sameOrigin(r.URL, via[0].URL.String()) {
			err := fmt.Errorf("mcptools: OAuth request to %s redirected to another origin (%s); refused: a redirect may stay within its origin only", via[0].URL.Redacted(), r.URL.Redacted())
			refused(err.Error())
			return err
		}
		return nil
	}}
}

// oauthAddrAllowed reports whether an OAuth request may connect to a:
// one of the addresses the bound server's host resolves to, or else a
// public address by guard (code.dny.dev/ssrf) that is no cloud metadata
// endpoint (internal/netguard: Azure's WireServer is public to ssrf) and
// none of own, this host's interface addresses (netguard.OwnAddrs: a
// public one reaches this host's services past its firewall).
func oauthAddrAllowed(ctx context.Context, guard *ssrf.Guardian, host string, a netip.Addr, own []netip.Addr) bool {
	ip := a.Unmap().WithZone("")
	if serverAddr(ctx, host, ip) {
		return true
	}
	return a.Zone() == "" && guard.SafeAddr(ip) == nil && !netguard.Metadata(ip) && !slices.Contains(own, ip)
}

// serverAddr reports whether ip is one of the addresses host resolves to.
func serverAddr(ctx context.Context, host string, ip netip.Addr) bool {
	if host == "" {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("") == ip
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false
	}
	for _, a := range as {
		if a.Unmap().WithZone("") == ip {
			return true
		}
	}
	return false
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// fetch sends the user to authURL and waits for the redirect carrying
// its state.
func (st *oauthState) fetch(ctx context.Context, authURL string, open func(context.Context, string) error) (*auth.AuthorizationResult, error) {
	u, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	state := u.Query().Get("state")
	ch := make(chan auth.AuthorizationResult, 1)
	st.mu.Lock()
	st.waiting[state] = ch
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.waiting, state)
		st.mu.Unlock()
	}()
	if err := open(ctx, authURL); err != nil {
		return nil, fmt.Errorf("opening the authorization URL: %v", err)
	}
	select {
	case r := <-ch:
		if r.Code == "" {
			return nil, errors.New("the authorization server sent no code (the user refused, or it failed)")
		}
		return &r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gave up waiting for the authorization redirect: %v", context.Cause(ctx))
	}
}

// callback receives the authorization server's redirect.
func (st *oauthState) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st.mu.Lock()
	ch := st.waiting[q.Get("state")]
	st.mu.Unlock()
	if ch == nil {
		http.Error(w, "glovebox: no authorization is waiting for this redirect", http.StatusBadRequest)
		return
	}
	select {
	case ch <- auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
	default:
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	msg := "glovebox is authorized; you can close this window."
	if e := q.Get("error"); e != "" {
		msg = "The authorization failed: " + e
	}
	fmt.Fprintf(w, "<!doctype html><title>glovebox</title><p>%s</p>\n", html.EscapeString(msg))
}

func (st *oauthState) close() {
	if st != nil && st.srv != nil {
		st.srv.Close()
	}
}

// tokenTransport sets the Authorization header from the host's
// TokenSource.
type tokenTransport struct {
	ts  TokenSource
	url string
	rt  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !sameOrigin(r.URL, t.url) { // a redirect elsewhere gets no token
		return t.rt.RoundTrip(r)
	}
	tok, err := t.ts(r.Context(), t.url)
	if err != nil {
		return nil, fmt.Errorf("the host's token source: %v", err)
	}
	if tok != nil && tok.AccessToken != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", tok.Type()+" "+tok.AccessToken)
	}
	resp, err := t.rt.RoundTrip(r)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		// Refused as a failed request, not a broken connection: under
		// 2026-07-28 the connection serves other users' tokens too.
		resp.Body.Close()
		msg := fmt.Sprintf("%v (%s)", errTokenRefused, resp.Status)
		if c, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate")); err == nil {
			for _, ch := range c {
				if e := ch.Params["error"]; e != "" {
					msg += ": " + e
				}
			}
		}
		return nil, refusedError(msg)
	}
	return resp, err
}

// errTokenRefused is the cause of a request the server answered with 401
// or 403 to the host's token.
var errTokenRefused = errors.New("the server refused the host's token for this request")

type refusedError string

func (e refusedError) Error() string { return string(e) }
func (e refusedError) Unwrap() error { return errTokenRefused }

// AcceptDefaults is a [Config].Elicit for unattended hosts: it accepts a
// form elicitation with the default value of each property of the
// requested schema that has one (properties without a default are left
// out, so a server that requires them sees them missing), and declines
// a URL elicitation (nobody is there to open it). Its errors: none.
func AcceptDefaults(_ context.Context, _ string, req *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	if req.Mode == "url" || req.URL != "" {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	content := map[string]any{}
	var schema struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if b, err := json.Marshal(req.RequestedSchema); err == nil && json.Unmarshal(b, &schema) == nil {
		for name, p := range schema.Properties {
			if p.Default != nil {
				content[name] = p.Default
			}
		}
	}
	return &mcp.ElicitResult{Action: "accept", Content: content}, nil
}
