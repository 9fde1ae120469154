package mcptools

import (
	"context"
	"net/netip"
	"testing"

	"code.dny.dev/ssrf"
)

// OAuth requests reach public addresses and the bound server's own host,
// and never a cloud metadata endpoint, though ssrf finds Azure's
// WireServer public.
func TestOAuthAddrAllowed(t *testing.T) {
	guard := ssrf.New(ssrf.WithAnyPort())
	ctx := context.Background()
	for _, c := range []struct {
		host, addr string
		ok         bool
	}{
		{"mcp.example", "8.8.8.8", true},
		{"mcp.example", "168.63.129.16", false},
		{"mcp.example", "169.254.169.254", false},
		{"mcp.example", "127.0.0.1", false},
		{"mcp.example", "10.0.0.5", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", false},
	} {
		if got := oauthAddrAllowed(ctx, guard, c.host, netip.MustParseAddr(c.addr)); got != c.ok {
			t.Errorf("server %s, address %s: allowed %v, want %v", c.host, c.addr, got, c.ok)
		}
	}
}
