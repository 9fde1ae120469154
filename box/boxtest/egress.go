package boxtest

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
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
)

// fakeDNS resolves the names it holds to their address and no other:
// an httptool.Config.Resolver for the test hosts of a suite.
type fakeDNS map[string]string

// LookupNetIP returns the address of host, or a not-found DNS error.
func (f fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// recorder is a host HTTP server answering body, which records each
// request's host and Authorization header.
type recorder struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	seen []string
}

func newRecorder(t *testing.T, body string) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen = append(r.seen, req.Host+" "+req.Header.Get("Authorization"))
		fmt.Fprint(w, body)
	}))
	t.Cleanup(r.srv.Close)
	r.port = r.srv.Listener.Addr().(*net.TCPAddr).Port
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// egressBox is the backend's box with httptool's proxy over dns, the
// loopback trusted and ports open.
func (s *suite) egressBox(t *testing.T, dns fakeDNS, ports ...int) box.Box {
	return s.b.WithEgress(t, egress.HTTPTool(httptool.Config{Ports: ports,
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: dns}))
}

// egress: the allowlist through the proxy, and the credentials proxy mode.
func (s *suite) egress(t *testing.T) {
	if s.b.WithEgress == nil && s.can(Egress) {
		s.b.Cannot = mapWith(s.b.Cannot, Egress, "the backend gives no WithEgress")
	}
	// EgressAllowlist: the command's only way out is the proxy, which
	// applies httptool's allowlist and address floor (the messages are
	// httptool's own); there is no direct route and no DNS; the
	// credentials proxy mode adds the header for the named host only.
	s.sub(t, "EgressAllowlist", needs(Exec, Egress), func(t *testing.T, _ box.Box) {
		const canary = "canary-eg-7f3e19"
		srv := newRecorder(t, "hello from host")
		port := srv.port
		b := s.egressBox(t, fakeDNS{"allowed.test": "127.0.0.1", "api.test": "127.0.0.1", "other.test": "127.0.0.1",
			"private.test": "10.1.2.3", "meta.test": "169.254.169.254"}, port, 80)
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
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", script},
			Network: box.Network{Allow: []string{"allowed.test", "api.test", "private.test", "meta.test"},
				Credentials: []box.HostCredential{{Host: "api.test", Value: func(context.Context) (string, error) { return "Bearer " + canary, nil }}}}})
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 8 || lines[0] != "hello from host" || lines[1] != "hello from host" ||
			!strings.HasPrefix(lines[2], "403 egress proxy: HTTPHostError: http: the host other.test") ||
			lines[3] != want[0] || lines[4] != want[1] || lines[5] != "direct refused" || lines[6] != "dns failed" || lines[7] != "0" {
			t.Errorf("stdout:\n%s\nstderr:\n%s\nwant refusals:\n%s", res.Stdout, res.Stderr, strings.Join(want, "\n"))
		}
		got := srv.requests()
		if len(got) != 2 || got[0] != fmt.Sprintf("allowed.test:%d ", port) || got[1] != fmt.Sprintf("api.test:%d Bearer %s", port, canary) {
			t.Errorf("the server saw %q", got)
		}
		if !hasEnforced(res, "network:egress-proxy") {
			t.Errorf("enforced %v", res.Enforced)
		}
	})
	// EgressInspect: Network.Inspect sees each plain request whole (its
	// method, URL, headers and body, before the proxy adds a credential)
	// and a CONNECT tunnel by its host and port only; a refusal answers
	// 403 with its message and the request never reaches the host.
	s.sub(t, "EgressInspect", needs(Exec, Egress), func(t *testing.T, _ box.Box) {
		const canary = "inspect-canary-51e2"
		srv := newRecorder(t, "passed")
		port := srv.port
		b := s.egressBox(t, fakeDNS{"allowed.test": "127.0.0.1", "tls.test": "127.0.0.1"}, port, 443)
		var mu sync.Mutex
		var seen []string
		inspect := func(r box.EgressRequest) error {
			mu.Lock()
			defer mu.Unlock()
			if r.Tunnel {
				seen = append(seen, fmt.Sprintf("tunnel %s:%s %q%q%v%d", r.Host, r.Port, r.Method, r.URL, r.Header, len(r.Body)))
				return errors.New("no tunnels to " + r.Host)
			}
			seen = append(seen, fmt.Sprintf("%s %s %s %s", r.Method, r.URL, r.Header.Get("X-Note"), r.Body))
			if strings.Contains(string(r.Body), canary) || strings.Contains(r.Header.Get("X-Note"), canary) {
				return errors.New("the request carries the canary")
			}
			return nil
		}
		script := fmt.Sprintf(`
import urllib.request, urllib.error
def go(req):
    try:
        print(urllib.request.urlopen(req, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
    except OSError as e:
        print("failed", "403" in str(e))
u = "http://allowed.test:%[1]d/x"
go(urllib.request.Request(u, data=b"hello", headers={"X-Note": "n1"}))
go(urllib.request.Request(u, data=b"key %[2]s", headers={"X-Note": "n2"}))
go(urllib.request.Request(u, headers={"X-Note": "in a header %[2]s"}))
go("https://tls.test/")
`, port, canary)
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", script},
			Network: box.Network{Allow: []string{"allowed.test", "tls.test"}, Inspect: inspect}})
		want := "passed\n403 egress proxy: the request carries the canary\n403 egress proxy: the request carries the canary\nfailed True"
		if strings.TrimSpace(res.Stdout) != want {
			t.Errorf("stdout:\n%s\nstderr:\n%s\nwant:\n%s", res.Stdout, res.Stderr, want)
		}
		if got := srv.requests(); len(got) != 1 {
			t.Errorf("the server saw %q, want only the first request", got)
		}
		mu.Lock()
		defer mu.Unlock()
		u := fmt.Sprintf("http://allowed.test:%d/x", port)
		wantSeen := []string{"POST " + u + " n1 hello", "POST " + u + " n2 key " + canary, "GET " + u + " in a header " + canary + " ", `tunnel tls.test:443 """"map[]0`}
		if strings.Join(seen, "\n") != strings.Join(wantSeen, "\n") {
			t.Errorf("Inspect saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(wantSeen, "\n"))
		}
	})
	// CredentialsProxyMode: the guest gets no token at all (its
	// environment, the files it can read and its processes' command lines
	// are searched for the canary); the proxy adds the Authorization
	// header to requests for the named host only, over a guest's own
	// header too, and refuses a CONNECT tunnel to it; the Result and a
	// failing Value's error never hold the value.
	s.sub(t, "CredentialsProxyMode", needs(Exec, Egress), func(t *testing.T, _ box.Box) {
		const canary = "cred-proxy-3c9a5d"
		srv := newRecorder(t, "ok")
		port := srv.port
		b := s.egressBox(t, fakeDNS{"api.test": "127.0.0.1", "plain.test": "127.0.0.1"}, port)
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
		res := run(t, b, c)
		if res.Stdout != "ok\nok\nok\ntunnel refused True\nfound []\n" {
			t.Errorf("stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
		}
		w := fmt.Sprintf("api.test:%d Bearer %s", port, canary)
		if got := srv.requests(); len(got) != 3 || got[0] != w || got[1] != w || got[2] != fmt.Sprintf("plain.test:%d ", port) {
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
	})
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// mapWith returns a copy of m with k set to v.
func mapWith(m map[Capability]string, k Capability, v string) map[Capability]string {
	out := map[Capability]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}
