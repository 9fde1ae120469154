package httptool

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
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Every connection a test makes goes through loopbackDial, which fails the
// test (and refuses) for any address outside 127.0.0.0/8 and ::1.
func loopbackDial(errorf func(string, ...any), address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		errorf("a test tried to dial %q, which is not a loopback address", address)
		return nil, fmt.Errorf("test dial to %q refused: not loopback", address)
	}
	var d net.Dialer
	return d.Dial("tcp", address)
}

// fakeResolver answers from a table; a name with several answer sets
// gives them in turn (the last one repeats), like a rebinding DNS server.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newResolver(pairs ...any) *fakeResolver {
	r := &fakeResolver{answers: map[string][][]netip.Addr{}, calls: map[string]int{}}
	for i := 0; i < len(pairs); i += 2 {
		name := pairs[i].(string)
		var set []netip.Addr
		for _, a := range pairs[i+1].([]string) {
			set = append(set, netip.MustParseAddr(a))
		}
		r.answers[name] = append(r.answers[name], set)
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sets := r.answers[host]
	if len(sets) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	n := r.calls[host]
	r.calls[host]++
	return sets[min(n, len(sets)-1)], nil
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// redirector is an injected final dial: every vetted address the tool
// asks for is connected to the local server instead, and recorded.
type redirector struct {
	errorf func(string, ...any) // reports a test failure
	server string               // the loopback server's host:port
	mu     sync.Mutex
	dialed []string
	refuse map[string]bool // addresses that act as down
}

func (d *redirector) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	down := d.refuse[address]
	d.mu.Unlock()
	if network != "tcp" {
		d.errorf("dial network %q, want tcp", network)
	}
	if down {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	return loopbackDial(d.errorf, d.server)
}

func (d *redirector) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// fixture is a local server and a tool that reaches it as the public
// hosts api.example.com (93.184.216.34) and www.example.org
// (2606:2800:220:1:248:1893:25c8:1946).
type fixture struct {
	srv   *httptest.Server
	hits  atomic.Int64
	res   *fakeResolver
	dial  *redirector
	tool  *Tool
	audit []AuditEntry
	mu    sync.Mutex
}

func newFixture(t *testing.T, h http.HandlerFunc, cfg Config) *fixture {
	t.Helper()
	f := &fixture{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	f.dial = &redirector{errorf: t.Errorf, server: f.srv.Listener.Addr().String()}
	if cfg.Resolver == nil {
		f.res = newResolver(
			"api.example.com", []string{"93.184.216.34"},
			"www.example.org", []string{"2606:2800:220:1:248:1893:25c8:1946"},
		)
		cfg.Resolver = f.res
	}
	if len(cfg.AllowHosts) == 0 && !cfg.AnyHost {
		cfg.AllowHosts = []string{"api.example.com", "*.example.org"}
	}
	cfg.Dial = f.dial.dial
	cfg.Audit = func(ctx context.Context, e AuditEntry) {
		f.mu.Lock()
		f.audit = append(f.audit, e)
		f.mu.Unlock()
	}
	tool, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tool.transport.CloseIdleConnections)
	f.tool = tool
	return f
}

// call calls the guest function fname with positional args.
func (f *fixture) call(fname string, args ...any) (map[string]any, error) {
	return callTool(f.tool, fname, glovebox.Args{Positional: args})
}

// funcMethod is the HTTP method of a guest function of Register's names
// ("" for http_request, which takes the method as an argument).
func funcMethod(name string) string {
	if name == "http_request" {
		return ""
	}
	return strings.ToUpper(strings.TrimPrefix(name, "http_"))
}

func callTool(tool *Tool, fname string, a glovebox.Args) (map[string]any, error) {
	out, err := tool.call(context.Background(), fname, funcMethod(fname), a)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

// class returns the guest class of a tool error, or "" for nil.
func class(err error) string {
	if err == nil {
		return ""
	}
	var te *glovebox.ToolError
	if errors.As(err, &te) {
		return te.Class
	}
	return fmt.Sprintf("not a ToolError: %v", err)
}

func wantClass(t *testing.T, err error, want string) {
	t.Helper()
	if got := class(err); got != want {
		t.Fatalf("class %q, want %q (error: %v)", got, want, err)
	}
}
