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
		// 9.9.9.9 stands for a public address of this host's own
		// interfaces (own below): public to ssrf, refused all the same,
		// unless it is the bound server's.
		{"mcp.example", "9.9.9.9", false},
		{"9.9.9.9", "9.9.9.9", true},
		{"mcp.example", "8.8.4.4", true},
	} {
		own := []netip.Addr{netip.MustParseAddr("9.9.9.9")}
		if got := oauthAddrAllowed(ctx, guard, c.host, netip.MustParseAddr(c.addr), own); got != c.ok {
			t.Errorf("server %s, address %s: allowed %v, want %v", c.host, c.addr, got, c.ok)
		}
	}
}
