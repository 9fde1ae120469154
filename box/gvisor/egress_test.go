package gvisor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/httptool"
)

type fakeDNS map[string]string

func (f fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestGVisorEgressAllowlist: under runsc the command's only way out is the
// proxy, which applies httptool's allowlist and address floor (the
// messages are httptool's own), and the credentials proxy mode adds the
// header for the named host only, the guest never holding the value.
func TestGVisorEgressAllowlist(t *testing.T) {
	requiresRunsc(t)
	const canary = "canary-gv-7f3e19"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		fmt.Fprint(w, "hello from host")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	b, err := gvisor.New(gvisor.Config{Egress: egress.HTTPTool(httptool.Config{
		Ports:           []int{port, 80},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolver:        fakeDNS{"allowed.test": "127.0.0.1", "api.test": "127.0.0.1", "other.test": "127.0.0.1", "private.test": "10.1.2.3", "meta.test": "169.254.169.254"},
	})})
	if errors.Is(err, box.ErrUnavailable) {
		t.Skipf("runsc is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// What httptool itself says for the refused hosts.
	ht, err := httptool.New(httptool.Config{AllowHosts: []string{"private.test", "meta.test"}, Ports: []int{80},
		Resolver: fakeDNS{"private.test": "10.1.2.3", "meta.test": "169.254.169.254"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ht.Close()
	var want []string
	for _, u := range []string{"http://private.test/", "http://meta.test/"} {
		_, err := ht.DialURL(context.Background(), u)
		if err == nil {
			t.Fatalf("httptool dialled %s", u)
		}
		want = append(want, "403 egress proxy: "+err.Error())
	}
	script := fmt.Sprintf(`
import urllib.request, urllib.error, socket, os
for u in ["http://allowed.test:%[1]d/", "http://api.test:%[1]d/", "http://other.test:%[1]d/", "http://private.test/", "http://meta.test/"]:
    try:
        print(urllib.request.urlopen(u, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
try:
    socket.create_connection(("127.0.0.1", %[1]d), timeout=2); print("direct connected")
except OSError: print("direct refused")
try:
    socket.getaddrinfo("allowed.test", 80); print("dns resolved")
except OSError: print("dns failed")
print(open("/proc/self/environ").read().count(%[2]q))
`, port, canary)
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"python3", "-c", script},
		Network: box.Network{Allow: []string{"allowed.test", "api.test", "private.test", "meta.test"},
			Credentials: []box.HostCredential{{Host: "api.test", Value: func(context.Context) (string, error) { return "Bearer " + canary, nil }}}}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 8 || lines[0] != "hello from host" || lines[1] != "hello from host" ||
		!strings.HasPrefix(lines[2], "403 egress proxy: HTTPHostError: http: the host other.test") ||
		lines[3] != want[0] || lines[4] != want[1] || lines[5] != "direct refused" || lines[6] != "dns failed" || lines[7] != "0" {
		t.Errorf("stdout:\n%s\nstderr:\n%s\nwant refusals:\n%s", res.Stdout, res.Stderr, strings.Join(want, "\n"))
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) != 2 || got[0] != fmt.Sprintf("allowed.test:%d ", port) || got[1] != fmt.Sprintf("api.test:%d Bearer %s", port, canary) {
		t.Errorf("the server saw %q", got)
	}
	if !strings.Contains(strings.Join(res.Enforced, ","), "network:egress-proxy") {
		t.Errorf("enforced %v", res.Enforced)
	}
}
