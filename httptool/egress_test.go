package httptool

import (
	"context"
	"strings"
	"testing"
)

// TestDialURLHostRefusalNamesNetwork: the egress proxy's host refusal (a
// command in an OS box) names the settings of the command's network
// (--network allow:HOST, box.network), not the HTTP tool's --http-allow,
// which does not widen what the proxy reaches.
func TestDialURLHostRefusalNamesNetwork(t *testing.T) {
	tool, err := New(Config{AllowHosts: []string{"example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	_, err = tool.DialURL(context.Background(), "http://evil.example.net/")
	if err == nil {
		t.Fatal("a host off the allowlist was dialled")
	}
	msg := err.Error()
	if !strings.Contains(msg, "evil.example.net") || !strings.Contains(msg, "--network allow:HOST") ||
		!strings.Contains(msg, "box.network") || strings.Contains(msg, "--http-allow") {
		t.Fatalf("refusal: %s", msg)
	}
}
