package bwrap_test

import (
	"context"
	"encoding/json"
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

// TestCredentialsProxyMode: the guest gets no token at all (its
// environment, the files it can read and its processes' memory maps are
// searched for the canary); the egress proxy adds the Authorization header
// to requests for the named host only, and only through the proxy; the
// result and a failing Value's error never hold the value.
func TestCredentialsProxyMode(t *testing.T) {
	requiresBwrap(t)
	const canary = "cred-proxy-3c9a5d"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	b, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{
		Ports:           []int{port},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolver:        fakeDNS{"api.test": "127.0.0.1", "plain.test": "127.0.0.1"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
import urllib.request, urllib.error, subprocess, http.client
def get(u, headers={}):
    try:
        print(urllib.request.urlopen(urllib.request.Request(u, headers=headers), timeout=5).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
get("http://api.test:%[1]d/a")
get("http://api.test:%[1]d/b", {"Authorization": "guest-made"})
get("http://plain.test:%[1]d/c")
c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=5)
c.set_tunnel("api.test", %[1]d)
try:
    c.request("GET", "/"); print("tunnel", c.getresponse().status)
except OSError as e:
    print("tunnel refused", "403" in str(e))
import os
canary = %[2]q[::-1].encode()  # reversed here, so no command line holds it
found = []
for top in ["/work", "/tmp", "/etc", "/run", "/proc"]:
    for d, dirs, files in os.walk(top):
        if d == "/proc":
            dirs[:] = [x for x in dirs if x.isdigit()]
            files = []
        elif d.startswith("/proc/"):
            dirs[:] = []
            files = [f for f in files if f in ("environ", "cmdline")]
        for f in files:
            try:
                if canary in open(os.path.join(d, f), "rb").read(): found.append(os.path.join(d, f))
            except OSError: pass
print("found", found)
`, port, reverse(canary))
	c := box.Command{Argv: []string{"python3", "-c", script},
		Network: box.Network{Allow: []string{"api.test", "plain.test"},
			Credentials: []box.HostCredential{{Host: "api.test", Value: func(context.Context) (string, error) { return "Bearer " + canary, nil }}}}}
	res, err := b.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "ok\nok\nok\ntunnel refused True\nfound []\n" {
		t.Errorf("stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	}
	w := fmt.Sprintf("api.test:%d Bearer %s", port, canary)
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) != 3 || got[0] != w || got[1] != w || got[2] != fmt.Sprintf("plain.test:%d ", port) {
		t.Errorf("the server saw %q", got)
	}
	if j, _ := json.Marshal(res); strings.Contains(string(j), canary) {
		t.Errorf("result holds the canary: %s", j)
	}
	c.Network.Credentials[0].Value = func(context.Context) (string, error) { return "", fmt.Errorf("vault said %s", canary) }
	if _, err := b.Run(context.Background(), c); err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "api.test") {
		t.Errorf("credential error: %v", err)
	}
	c.Network.Credentials[0].Host = "elsewhere.test"
	if _, err := b.Run(context.Background(), c); !errors.Is(err, box.ErrInvalidCommand) {
		t.Errorf("a credential for a host not allowed: %v", err)
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
