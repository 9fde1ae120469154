package mcptools_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// A hostile bound server cannot make the host fetch other addresses
// through OAuth discovery: its WWW-Authenticate resource_metadata, its
// metadata's authorization_servers and a redirect of its well-known
// document all point at a listener on another loopback address (another
// host's service, for the policy), and each fetch is refused with an
// error naming the address, the listener never reached. The same
// server's own address stays reachable (TestOAuthLoopbackFlowAndRefresh).
func TestOAuthDiscoveryStaysOnTheServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	var hits atomic.Int32
	inner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"resource":"x","authorization_servers":["http://127.0.0.2/"]}`))
	}))
	inner.Listener.Close()
	inner.Listener = ln
	inner.Start()
	t.Cleanup(inner.Close)

	for _, c := range []struct{ name, want string }{
		{"resource_metadata", "127.0.0.2"},
		{"authorization_servers", "127.0.0.2"},
		{"redirect", "redirected to another origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mux := http.NewServeMux()
			hostile := httptest.NewServer(mux)
			t.Cleanup(hostile.Close)
			prm := hostile.URL + "/.well-known/oauth-protected-resource/mcp"
			switch c.name {
			case "resource_metadata":
				prm = inner.URL + "/prm"
			case "authorization_servers":
				mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					json.NewEncoder(w).Encode(map[string]any{"resource": hostile.URL + "/mcp", "authorization_servers": []string{inner.URL}})
				})
			case "redirect":
				other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
				t.Cleanup(other.Close)
				mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, other.URL+"/prm", http.StatusFound)
				})
			}
			mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+prm+`"`)
				w.WriteHeader(http.StatusUnauthorized)
			})
			before := hits.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var set glovebox.Toolset
			b, err := mcptools.Bind(ctx, &set, mcptools.Config{}, mcptools.Server{Name: "h", URL: hostile.URL + "/mcp",
				OAuth: &mcptools.OAuth{ClientID: "glovebox-test", Open: func(context.Context, string) error { return nil }}})
			if err == nil {
				b.Close()
				t.Fatal("bound a server whose OAuth discovery points elsewhere")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.want) || hits.Load() != before {
				t.Fatalf("want an error with %q and no fetch of the other listener (%d), got: %v", c.want, hits.Load()-before, err)
			}
		})
	}
}
