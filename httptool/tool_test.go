package httptool

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

func TestGetThroughVettedAddress(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "ua": r.UserAgent(), "big": json.Number("123456789012345678901234567890"), "f": 1.5})
	}, Config{})
	res, err := f.call("http_get", "http://API.example.com./items")
	if err != nil {
		t.Fatal(err)
	}
	body := res["body"].(map[string]any)
	if res["status"] != int64(200) || res["body_encoding"] != "json" || body["host"] != "api.example.com" || body["ua"] != "glovebox-httptool" ||
		body["big"] != json.Number("123456789012345678901234567890") || body["f"] != json.Number("1.5") {
		t.Fatalf("%#v", res)
	}
	if h := res["headers"].(map[string]any); h["x-multi"] != "a, b" || h["content-type"] != "application/json" {
		t.Fatalf("headers %#v", h)
	}
	if got := f.dial.addresses(); !slices.Equal(got, []string{"93.184.216.34:80"}) {
		t.Fatalf("dialed %v", got)
	}
	// IPv6 answers are dialed as such.
	if _, err := f.call("http_get", "http://www.example.org/"); err != nil {
		t.Fatal(err)
	}
	if got := f.dial.addresses(); got[len(got)-1] != "[2606:2800:220:1:248:1893:25c8:1946]:80" {
		t.Fatalf("dialed %v", got)
	}
	if len(f.audit) != 2 || f.audit[0].Addr != netip.MustParseAddrPort("93.184.216.34:80") || f.audit[0].Status != 200 ||
		f.audit[0].Host != "api.example.com" || f.audit[0].Err != nil || f.audit[0].BodyBytes == 0 {
		t.Fatalf("audit %+v", f.audit)
	}
}

// TestRebinding: a resolver that answers a public address, then a private
// one. Each request resolves once and dials what it vetted; the second is
// refused before any connection, and its message does not reveal the
// private address (the audit entry does).
func TestRebinding(t *testing.T) {
	res := newResolver(
		"api.example.com", []string{"93.184.216.34"},
		"api.example.com", []string{"10.0.0.5"},
	)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, Config{Resolver: res})
	if _, err := f.call("http_get", "http://api.example.com/"); err != nil {
		t.Fatal(err)
	}
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassBlockedAddress)
	var te *glovebox.ToolError
	errors.As(err, &te)
	if strings.Contains(te.Message, "10.0.0.5") || !strings.Contains(te.Message, "private-network") || !strings.Contains(err.Error(), "10.0.0.5") {
		t.Fatalf("guest message %q, audit error %q", te.Message, err)
	}
	if res.count("api.example.com") != 2 || f.hits.Load() != 1 || len(f.dial.addresses()) != 1 {
		t.Fatalf("resolves %d, hits %d, dials %v", res.count("api.example.com"), f.hits.Load(), f.dial.addresses())
	}
	if len(f.audit) != 2 || class(f.audit[1].Err) != ClassBlockedAddress || f.audit[1].Host != "api.example.com" || f.audit[1].Addr.IsValid() || f.audit[1].Status != 0 {
		t.Fatalf("audit %+v", f.audit)
	}
}

// TestConcurrentBudget: many goroutines share one tool; exactly
// MaxRequests requests are made.
func TestConcurrentBudget(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{MaxRequests: 50})
	var wg sync.WaitGroup
	var ok, spent atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				_, err := f.call("http_get", "http://api.example.com/")
				switch class(err) {
				case "":
					ok.Add(1)
				case ClassBudget:
					spent.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 || spent.Load() != 30 || f.hits.Load() != 50 || len(f.audit) != 80 {
		t.Fatalf("ok %d, over budget %d, hits %d, audited %d", ok.Load(), spent.Load(), f.hits.Load(), len(f.audit))
	}
}

// TestMixedAnswers: one bad address among good ones refuses the request.
func TestMixedAnswers(t *testing.T) {
	for _, bad := range []string{"10.0.0.1", "127.0.0.1", "169.254.169.254", "::1", "64:ff9b::a9fe:a9fe", "fd00:ec2::254"} {
		res := newResolver("api.example.com", []string{"93.184.216.34", bad, "93.184.216.35"})
		f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res})
		_, err := f.call("http_get", "https://api.example.com/")
		wantClass(t, err, ClassBlockedAddress)
		if len(f.dial.addresses()) != 0 {
			t.Fatalf("%s: dialed %v", bad, f.dial.addresses())
		}
	}
	// An IPv4-mapped answer is the IPv4 address it maps.
	res := newResolver("api.example.com", []string{"::ffff:93.184.216.34"})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res})
	if _, err := f.call("http_get", "http://api.example.com/"); err != nil {
		t.Fatal(err)
	}
	if got := f.dial.addresses(); !slices.Equal(got, []string{"93.184.216.34:80"}) {
		t.Fatalf("dialed %v", got)
	}
	res = newResolver("api.example.com", []string{"::ffff:169.254.169.254"})
	f = newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res})
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassBlockedAddress)
}

// TestRedirectNotFollowed: a redirect to the metadata address comes back
// to the guest as it is; following it by hand is refused.
func TestRedirectNotFollowed(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/", http.StatusFound)
	}, Config{})
	res, err := f.call("http_get", "http://api.example.com/start")
	if err != nil {
		t.Fatal(err)
	}
	loc := res["headers"].(map[string]any)["location"].(string)
	if res["status"] != int64(302) || loc != "http://169.254.169.254/latest/meta-data/iam/" || f.hits.Load() != 1 || len(f.dial.addresses()) != 1 {
		t.Fatalf("%#v, hits %d, dials %v", res, f.hits.Load(), f.dial.addresses())
	}
	_, err = f.call("http_get", loc)
	wantClass(t, err, ClassURL)
	// Even with IP literals allowed, the floor refuses it.
	g := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{AnyHost: true, AllowIPLiterals: true})
	_, err = g.call("http_get", loc)
	wantClass(t, err, ClassBlockedAddress)
	// And a redirect to a name that resolves there.
	res2 := newResolver("metadata.example.org", []string{"169.254.169.254"})
	h := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res2})
	_, err = h.call("http_get", "http://metadata.example.org/latest/")
	wantClass(t, err, ClassBlockedAddress)
	if len(g.dial.addresses())+len(h.dial.addresses()) != 0 {
		t.Fatal("dialed a refused address")
	}
}

func TestBodyCap(t *testing.T) {
	const max = 1000
	gz := func(n int) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(bytes.Repeat([]byte("a"), n))
		w.Close()
		return b.Bytes()
	}
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		switch r.URL.Path {
		case "/plain":
			w.Write(bytes.Repeat([]byte("a"), n))
		case "/chunked": // no Content-Length: the cap applies while streaming
			for range n {
				w.Write([]byte("a"))
				w.(http.Flusher).Flush()
				if r.Context().Err() != nil {
					return
				}
			}
		case "/gzip":
			if r.Header.Get("Accept-Encoding") != "gzip" {
				t.Errorf("Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
			}
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz(n))
		}
	}, Config{MaxResponseBody: max})
	for _, c := range []struct {
		path string
		n    int
		want string
	}{
		{"/plain", max, ""},
		{"/plain", max + 1, ClassResponseTooLarge},
		{"/plain", 100 * max, ClassResponseTooLarge},
		{"/chunked", max, ""},
		{"/chunked", max + 1, ClassResponseTooLarge},
		{"/gzip", max, ""},
		{"/gzip", max + 1, ClassResponseTooLarge},
		{"/gzip", 10 << 20, ClassResponseTooLarge}, // 10 MiB from ~10 KiB on the wire
	} {
		if c.path == "/plain" {
			// HEAD announces the size but sends no body: not too large.
			res, err := f.call("http_head", "http://api.example.com/plain?n="+strconv.Itoa(c.n))
			if err != nil || res["body"] != "" {
				t.Errorf("HEAD %d: %v %v", c.n, res, err)
			}
		}
		res, err := f.call("http_get", "http://api.example.com"+c.path+"?n="+strconv.Itoa(c.n))
		if class(err) != c.want {
			t.Errorf("%s %d: %v, want %q", c.path, c.n, err, c.want)
			continue
		}
		if err == nil && res["body"] != strings.Repeat("a", c.n) {
			t.Errorf("%s %d: body of %d bytes", c.path, c.n, len(res["body"].(string)))
		}
	}
}

// TestSlowServer: a server that never answers is cut off at RequestTimeout.
func TestSlowServer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-body" {
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, Config{RequestTimeout: 50 * time.Millisecond})
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		_, err := f.call("http_get", "http://api.example.com"+path)
		wantClass(t, err, ClassTimeout)
	}
}

// TestHeaderFlood: a response with more header bytes than the cap.
func TestHeaderFlood(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 200 {
			w.Header().Set("X-Flood-"+strconv.Itoa(i), strings.Repeat("x", 1000))
		}
	}, Config{MaxResponseHeader: 16 << 10})
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassResponseTooLarge)
}

func TestRequestBudget(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{MaxRequests: 3})
	for _, u := range []string{"http://api.example.com/", "http://evil.com/", "http://api.example.com/"} { // refused ones count
		f.call("http_get", u)
	}
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassBudget)
	if f.hits.Load() != 2 {
		t.Fatalf("%d hits", f.hits.Load())
	}
	f.tool.Reset()
	if _, err := f.call("http_get", "http://api.example.com/"); err != nil {
		t.Fatal(err)
	}
}

// TestTimeBudget: a request that would outlast the lifetime time budget is
// cut off when it runs out, and later requests are refused until Reset.
func TestTimeBudget(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}, Config{MaxTime: 50 * time.Millisecond, RequestTimeout: time.Hour})
	_, err := f.call("http_get", "http://api.example.com/slow")
	wantClass(t, err, ClassBudget)
	_, err = f.call("http_get", "http://api.example.com/fast")
	wantClass(t, err, ClassBudget)
	if !strings.Contains(err.Error(), "time budget") {
		t.Fatal(err)
	}
	f.tool.Reset()
	// Checked without a request: one would have to finish within 50 ms.
	if left, _, err := f.tool.admit(); err != nil || left != 50*time.Millisecond {
		t.Fatalf("after Reset: %v left, %v", left, err)
	}
}

func TestBodiesAndMethods(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/vnd.api+json; charset=utf-8")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "ct": r.Header.Get("Content-Type"), "body": string(b), "auth": r.Header.Get("Authorization")})
	}, Config{})
	cases := []struct {
		fname  string
		args   []any
		kw     map[string]any
		method string
		body   string
		ct     string
	}{
		{"http_post", []any{"http://api.example.com/", map[string]any{"a": []any{int64(1), "<b>"}}}, nil, "POST", `{"a":[1,"<b>"]}`, "application/json"},
		{"http_put", []any{"http://api.example.com/", "raw text", map[string]any{"Content-Type": "text/plain"}}, nil, "PUT", "raw text", "text/plain"},
		{"http_patch", []any{"http://api.example.com/"}, map[string]any{"body": []any{true, nil}}, "PATCH", "[true,null]", "application/json"},
		{"http_delete", []any{"http://api.example.com/"}, map[string]any{"headers": map[string]any{"Authorization": "Bearer t"}}, "DELETE", "", ""},
		{"http_request", []any{"options", "http://api.example.com/"}, nil, "OPTIONS", "", ""},
		{"http_request", []any{"POST", "http://api.example.com/", map[string]any{}, int64(42)}, nil, "POST", "42", "application/json"},
		{"http_head", []any{"http://api.example.com/"}, nil, "HEAD", "", ""},
	}
	for _, c := range cases {
		res, err := callTool(f.tool, c.fname, glovebox.Args{Positional: c.args, Keyword: c.kw})
		if err != nil {
			t.Errorf("%s: %v", c.fname, err)
			continue
		}
		if c.method == "HEAD" {
			if res["body"] != "" || res["status"] != int64(200) {
				t.Errorf("HEAD: %#v", res)
			}
			continue
		}
		got := res["body"].(map[string]any)
		if got["method"] != c.method || got["body"] != c.body || got["ct"] != c.ct || (c.kw["headers"] != nil && got["auth"] != "Bearer t") {
			t.Errorf("%s: %#v", c.fname, got)
		}
	}
	for _, c := range []struct {
		fname string
		args  []any
		kw    map[string]any
	}{
		{"http_get", nil, nil},
		{"http_get", []any{int64(1)}, nil},
		{"http_get", []any{"http://api.example.com/", "notahash"}, nil},
		{"http_get", []any{"http://api.example.com/", map[string]any{}, "extra"}, nil},
		{"http_get", []any{"http://api.example.com/"}, map[string]any{"Accept": "x"}},
		{"http_get", []any{"http://api.example.com/"}, map[string]any{"body": "x"}},
		{"http_get", []any{"http://api.example.com/", map[string]any{}}, map[string]any{"headers": map[string]any{}}},
		{"http_request", []any{"CONNECT", "http://api.example.com/"}, nil},
		{"http_request", []any{"GET\r\n", "http://api.example.com/"}, nil},
		{"http_request", []any{nil, "http://api.example.com/"}, nil},
		{"http_post", []any{"http://api.example.com/", math.Inf(1)}, nil},
	} {
		_, err := callTool(f.tool, c.fname, glovebox.Args{Positional: c.args, Keyword: c.kw})
		if class(err) != ClassArgument {
			t.Errorf("%s %v %v: %v, want %s", c.fname, c.args, c.kw, err, ClassArgument)
		}
	}
}

func TestResponseBodies(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bad-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"a": 1`)
		case "/trailing-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"a": 1} {"b": 2}`)
		case "/deep-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Repeat("[", maxJSONDepth+1)+strings.Repeat("]", maxJSONDepth+1))
		case "/binary":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte{0xff, 0x00, 0xfe})
		case "/text":
			io.WriteString(w, "héllo")
		case "/controls":
			io.WriteString(w, "a\x01b")
		}
	}, Config{})
	for path, want := range map[string][2]any{
		"/bad-json":      {"text", `{"a": 1`},
		"/trailing-json": {"text", `{"a": 1} {"b": 2}`},
		"/deep-json":     {"text", strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)},
		"/binary":        {"base64", "/wD+"},
		"/text":          {"text", "héllo"},
		"/controls":      {"base64", "YQFi"},
	} {
		res, err := f.call("http_get", "http://api.example.com"+path)
		if err != nil || res["body_encoding"] != want[0] || res["body"] != want[1] {
			t.Errorf("%s: %#v %v", path, res, err)
		}
	}
}

func TestTransportErrors(t *testing.T) {
	res := newResolver("api.example.com", []string{"93.184.216.34"}, "down.example.org", []string{"93.184.216.99"})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res})
	f.dial.refuse = map[string]bool{"93.184.216.99:80": true}
	_, err := f.call("http_get", "http://down.example.org/")
	wantClass(t, err, ClassTransport)
	_, err = f.call("http_get", "http://nowhere.example.org/")
	wantClass(t, err, ClassTransport)
	if !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	// A server that hangs up without answering.
	g := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}, Config{})
	_, err = g.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassTransport)
}

// TestEnvironmentProxyIgnored: HTTP_PROXY points at a local proxy; the
// request still goes straight to the vetted address.
func TestEnvironmentProxyIgnored(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the proxy was used for %s", r.URL)
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{})
	if _, err := f.call("http_get", "http://api.example.com/"); err != nil {
		t.Fatal(err)
	}
	if f.hits.Load() != 1 {
		t.Fatal("the server was not reached")
	}
}

// TestTLS: the connection goes to the vetted address while TLS verifies
// the certificate against the host name.
func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure "+r.TLS.ServerName)
	}))
	defer srv.Close()
	d := &redirector{errorf: t.Errorf, server: srv.Listener.Addr().String()}
	// httptest's certificate names example.com.
	tool, err := New(Config{AllowHosts: []string{"example.com", "other.test"}, Resolver: newResolver("example.com", []string{"93.184.216.34"}, "other.test", []string{"93.184.216.34"}), Dial: d.dial})
	if err != nil {
		t.Fatal(err)
	}
	tool.transport.TLSClientConfig.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	res, err := callTool(tool, "http_get", glovebox.Args{Positional: []any{"https://example.com/"}})
	if err != nil || res["body"] != "secure example.com" {
		t.Fatalf("%#v %v", res, err)
	}
	// A name the certificate does not cover fails verification.
	_, err = callTool(tool, "http_get", glovebox.Args{Positional: []any{"https://other.test/"}})
	wantClass(t, err, ClassTransport)
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatal(err)
	}
}

// TestRealDialTrusted: with the default dialer (its Control checking
// again) a trusted loopback prefix is reachable, and an untrusted one is
// not, by literal or by name.
func TestRealDialTrusted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "inside") }))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	port := int(ap.Port())
	res := newResolver("svc.internal.test", []string{"127.0.0.1"})
	tool, err := New(Config{
		AllowHosts: []string{"svc.internal.test", "127.0.0.1"}, AllowIPLiterals: true, Ports: []int{port},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Resolver: res,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tool.transport.CloseIdleConnections()
	for _, u := range []string{srv.URL, "http://svc.internal.test:" + strconv.Itoa(port) + "/"} {
		out, err := callTool(tool, "http_get", glovebox.Args{Positional: []any{u}})
		if err != nil || out["body"] != "inside" {
			t.Fatalf("%s: %#v %v", u, out, err)
		}
	}
	untrusted, err := New(Config{AllowHosts: []string{"svc.internal.test", "127.0.0.1"}, AllowIPLiterals: true, Ports: []int{port}, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{srv.URL, "http://svc.internal.test:" + strconv.Itoa(port) + "/"} {
		_, err := callTool(untrusted, "http_get", glovebox.Args{Positional: []any{u}})
		wantClass(t, err, ClassBlockedAddress)
	}
	// The dial layer on its own: a pin naming a loopback address is still
	// refused by dialContext and by the dialer's Control.
	ctx := context.WithValue(context.Background(), pinKey{}, &pin{hostport: "x:" + strconv.Itoa(port), addrs: []netip.Addr{ap.Addr()}, req: context.Background()})
	if c, err := untrusted.dialContext(ctx, "tcp", "x:"+strconv.Itoa(port)); err == nil {
		c.Close()
		t.Fatal("dialContext dialed an untrusted loopback address")
	}
	if c, err := untrusted.dialContext(context.Background(), "tcp", srv.Listener.Addr().String()); err == nil {
		c.Close()
		t.Fatal("dialContext dialed without a pin")
	}
}

func TestRegister(t *testing.T) {
	tool, err := New(Config{AnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	if err := tool.Register(&ts); err != nil {
		t.Fatal(err)
	}
	want := []string{"http_delete", "http_get", "http_head", "http_patch", "http_post", "http_put", "http_request"}
	if !slices.Equal(ts.Names(), want) {
		t.Fatalf("%v", ts.Names())
	}
	if err := tool.Register(&ts); err == nil {
		t.Fatal("registering twice worked")
	}
}

// TestRegisterAs: Enclave's names (no prefix), documented for a model
// with the hosts the tool reaches; a name taken adds nothing.
func TestRegisterAs(t *testing.T) {
	tool, err := New(Config{AllowHosts: []string{"*.example.com", "api.example.org"}, Ports: []int{443, 8443}})
	if err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	if err := ts.Add("get", func(context.Context, glovebox.Args) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := tool.RegisterAs(&ts, ""); err == nil {
		t.Fatal("registered over an existing name")
	}
	if got := ts.Names(); !slices.Equal(got, []string{"get"}) {
		t.Fatalf("a failed RegisterAs left %v", got)
	}
	var fresh glovebox.Toolset
	if err := tool.RegisterAs(&fresh, ""); err != nil {
		t.Fatal(err)
	}
	want := []string{"delete", "get", "head", "patch", "post", "put", "request"}
	if got := fresh.Names(); !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &fresh, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	docs := map[string]glovebox.ToolDoc{}
	for _, d := range rt.ToolDocs() {
		docs[d.Name] = d
	}
	post := docs["post"]
	if !strings.Contains(post.Description, "*.example.com, api.example.org only (ports 443, 8443)") ||
		len(post.Params) != 3 || post.Params[0].Name != "url" || !post.Params[0].Required || post.Params[1].Name != "body" {
		t.Errorf("post's doc: %+v", post)
	}
	if req := docs["request"]; req.Params[0].Name != "method" || req.Example != `request("GET", "https://api.example.com/")` {
		t.Errorf("request's doc: %+v", req)
	}
}

func TestCloseIsSafeToRepeatAndReuse(t *testing.T) {
	tool, err := New(Config{AnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	tool.Close()
	tool.Close()
	// Still usable: URL rules run before any connection.
	if _, err := tool.do(context.Background(), "GET", "ftp://x/", nil, nil); err == nil {
		t.Fatal("a refused URL passed after Close")
	}
}
