package httptool

import (
	"context"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// The HTTP tools are sinks like any other: once a tool of the Toolset is
// labelled, a request carrying a labelled value — in the URL (plain or
// URL-encoded), a header or the body — is refused before it is made.
func TestHTTPToolIsASink(t *testing.T) {
	guestRuntime(t) // makes guest.tool
	var ts glovebox.Toolset
	if err := guest.tool.Register(&ts); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("account", func() map[string]string { return map[string]string{"token": "sk-live-4f9a8b7c6d5e"} }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Label("account", glovebox.Label{Kind: glovebox.KindSecret, Path: "token"}); err != nil {
		t.Fatal(err)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	guest.tool.Reset()
	guest.mu.Lock()
	before := len(guest.audit)
	guest.mu.Unlock()
	res, err := rt.Eval(context.Background(), `k = account["token"]
		require "uri"
		tries = [
			-> { http_get("http://api.example.com/hi?k=" + k) },
			-> { http_get("http://api.example.com/hi?k=" + URI.encode_www_form_component(k + " x")) },
			-> { http_post("http://api.example.com/echo", {"note" => "key: #{k.upcase}"}) },
			-> { http_request(:get, "http://api.example.com/hi", headers: {"Authorization" => "Bearer " + [k].pack("m0")}) },
		]
		tries.map { |t| begin; t.call; :sent; rescue Glovebox::ToolDenied => e; e.message; end } +
			[http_get("http://api.example.com/hi")["status"]]`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusOK {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	v := res.Value.([]any)
	for i, x := range v[:4] {
		if s, _ := x.(string); !strings.Contains(s, "may not receive secret data") {
			t.Errorf("request %d: %v, want ToolDenied naming secret", i+1, x)
		}
	}
	if v[4] != int64(200) {
		t.Errorf("a request without the secret gave %v", v[4])
	}
	guest.mu.Lock()
	made := len(guest.audit) - before
	guest.mu.Unlock()
	if made != 1 {
		t.Errorf("%d requests reached the network, want only the one without the secret", made)
	}
}
