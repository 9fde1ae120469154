package bwrap_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
)

type fakeDNS map[string]string

func (f fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestEgressAllowlist: the command's only way out is the proxy, which
// applies httptool's allowlist and address floor.
func TestEgressAllowlist(t *testing.T) {
	requiresBwrap(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from host") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	b, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{
		Ports:           []int{port, 80},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolver:        fakeDNS{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1", "private.test": "10.1.2.3", "meta.test": "169.254.169.254"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
import urllib.request, urllib.error, socket
for u in ["http://allowed.test:%[1]d/", "http://other.test:%[1]d/", "http://private.test/", "http://meta.test/"]:
    try:
        print(urllib.request.urlopen(u, timeout=5).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip()[:60])
try:
    socket.create_connection(("127.0.0.1", %[1]d), timeout=2); print("direct connected")
except OSError: print("direct refused")
`, port)
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"python3", "-c", script},
		Network: box.Network{Allow: []string{"allowed.test", "private.test", "meta.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 5 || lines[0] != "hello from host" || !strings.HasPrefix(lines[1], "403 egress proxy: HTTPHostError: http: the host other.test") ||
		!strings.HasPrefix(lines[2], "403 egress proxy: http: the host private.test resolves to") ||
		!strings.HasPrefix(lines[3], "403 egress proxy: http: the host meta.test resolves to") || lines[4] != "direct refused" {
		t.Errorf("stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	}
}
